/**
 * D5: the inbox's codec server, on the protocol the Temporal Web UI calls (`POST <endpoint>/decode`, `/download`,
 * `/encode`, each with `{"payloads": [{"metadata": {k: base64}, "data": base64}]}`). It opens a sealed payload (D4)
 * only for a person signed in to the inbox whom the payload's owner names — a tenant's `viewers` or `approvers`, the
 * platform's `inbox.operators` — and gives everything else back as it came, sealed: the UI shows those as they lie in
 * Temporal. It never seals (`/encode` is refused: a person's input from the UI reaches the job plain, which is theirs
 * to send, not the codec server's to seal for them) and never answers a browser of another origin than the Temporal
 * UI's. Every request that opened or refused anything is one line in the decode record (`oz0 inbox decodes`).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Context, Env, Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { z } from 'zod';
import type { Payload } from '@temporalio/common';
import { ExternalStorageRunner, isReferencePayload } from '@temporalio/common/lib/internal-non-workflow';
import { answererName, mayRead } from '../../common/approvers';
import type { Identity } from '../../common/approvers';
import type { LoadedConfig } from '../../common/config';
import { PLATFORM, isSealed, openSealed, sealedWith } from '../../data';
import type { ProcessData } from '../../data';

/** A payload as the codec protocol carries it: protobuf's JSON, bytes in base64. */
const WirePayloadSchema = z.looseObject({
  metadata: z.record(z.string().max(1000), z.base64()).optional(),
  data: z.base64().optional(),
  /** What the UI keeps of an External Storage claim beside it (protobuf's JSON of a newer Payload). */
  externalPayloads: z.array(z.unknown()).max(100).optional(),
});
const CodecRequestSchema = z.strictObject({ payloads: z.array(WirePayloadSchema).max(10_000) });
type WirePayload = z.infer<typeof WirePayloadSchema>;

/** One line of the decode record. */
export const DecodeRecordSchema = z.strictObject({
  at: z.string(),
  who: z.string(),
  issuer: z.string(),
  subject: z.string(),
  op: z.enum(['decode', 'download']),
  /** The owners whose payloads were opened for this person, and the jobs they were sealed for. */
  tenants: z.array(z.string()),
  jobs: z.array(z.string()),
  opened: z.number().int().min(0),
  /** Sealed payloads given back sealed: of owners this person may not read, or whose key the inbox lacks. */
  refused: z.number().int().min(0),
  refusedTenants: z.array(z.string()),
  lacking: z.array(z.string()).optional(),
});
export type DecodeRecord = z.infer<typeof DecodeRecordSchema>;

export interface CodecOptions {
  config: LoadedConfig;
  data: ProcessData;
  /** The person signed in on this request, if any. */
  identityOf(c: Context): Promise<Identity | undefined>;
  /** Origins whose pages may call it with the person's cookie (the Temporal UI's). */
  origins: string[];
  /** The decode record's file. */
  recordFile: string;
  log(line: string): void;
}

/** The decode record's file: `inbox.decodeLog`, or `decodes.jsonl` in the node's state folder. */
export function decodeRecordFile(config: LoadedConfig): string {
  const named = config.inbox?.decodeLog;
  return named ? path.resolve(config.baseDir, named) : path.join(config.node.stateDir, 'decodes.jsonl');
}

function toPayload(wire: WirePayload): Payload {
  return {
    metadata: Object.fromEntries(Object.entries(wire.metadata ?? {}).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
    data: Buffer.from(wire.data ?? '', 'base64'),
  };
}

function toWire(payload: Payload): WirePayload {
  const b64 = (b: Uint8Array | null | undefined) => Buffer.from(b ?? new Uint8Array()).toString('base64');
  return {
    metadata: Object.fromEntries(Object.entries(payload.metadata ?? {}).map(([k, v]) => [k, b64(v)])),
    data: b64(payload.data),
  };
}

/** Mounts `/codec/decode`, `/codec/download` and `/codec/encode` (and their preflights) on the inbox's app. */
export function mountCodec<E extends Env>(app: Hono<E>, opts: CodecOptions): void {
  const { config, data } = opts;
  const namespace = config.temporal.namespace;
  const maxBytes = Math.ceil((config.node.maxResultMiB * 4) / 3 + 8) * 1024 * 1024;
  fs.mkdirSync(path.dirname(opts.recordFile), { recursive: true, mode: 0o700 });

  const cors = (c: Context): 'same' | 'allowed' | 'refused' => {
    const origin = c.req.header('Origin');
    if (!origin) return 'same';
    if (origin === new URL(c.req.url).origin) return 'same';
    if (!opts.origins.includes(origin)) return 'refused';
    c.header('Access-Control-Allow-Origin', origin);
    c.header('Access-Control-Allow-Credentials', 'true');
    c.header('Vary', 'Origin');
    return 'allowed';
  };

  app.options('/codec/*', (c) => {
    if (cors(c) === 'refused') return c.body(null, 403);
    c.header('Access-Control-Allow-Methods', 'POST');
    c.header('Access-Control-Allow-Headers', 'Content-Type, X-Namespace, Authorization, Authorization-Extras');
    c.header('Access-Control-Max-Age', '600');
    return c.body(null, 204);
  });

  const refuseOrigin = (c: Context) =>
    c.json(
      { error: `this codec server answers only the Temporal UI at ${opts.origins.join(', ') || '(none set)'}` },
      403,
    );

  app.post('/codec/encode', (c) => {
    if (cors(c) === 'refused') return refuseOrigin(c);
    return c.json(
      {
        error:
          "oz0's codec server only opens payloads: a job's payloads are sealed by oz0's nodes and clients with its tenant's key (SPEC D4); input given in the Temporal UI reaches the job as typed",
      },
      403,
    );
  });

  const handle = (op: 'decode' | 'download') => async (c: Context) => {
    if (cors(c) === 'refused') return refuseOrigin(c);
    const who = await opts.identityOf(c);
    if (!who) return c.json({ error: 'sign in to the approvals inbox first' }, 401);
    const asked = c.req.header('X-Namespace');
    if (asked && asked !== namespace) {
      return c.json({ error: `this codec server reads the namespace ${namespace} only, not ${asked}` }, 403);
    }
    let body: z.infer<typeof CodecRequestSchema>;
    try {
      body = CodecRequestSchema.parse(await c.req.json());
    } catch (err) {
      const why = err instanceof z.ZodError ? err.issues.map((i) => `${i.path.join('.')}: ${i.message}`) : [];
      return c.json({ error: `not a codec request: ${why.slice(0, 3).join('; ') || (err as Error).message}` }, 400);
    }
    let payloads = body.payloads.map(toPayload);
    if (op === 'download') {
      if (!payloads.every(isReferencePayload)) return c.json({ error: 'only a stored payload is downloaded' }, 400);
      if (!data.externalStorage) return c.json({ error: 'this inbox has no payload store (payloads.store)' }, 404);
      try {
        payloads = await new ExternalStorageRunner(data.externalStorage).retrieve(payloads);
      } catch (err) {
        opts.log(`a download for ${answererName(who)} failed: ${(err as Error).message}`);
        return c.json({ error: `the stored payload could not be read: ${(err as Error).message}` }, 502);
      }
    }
    const seen = { opened: 0, refused: 0, tenants: new Set<string>(), jobs: new Set<string>() };
    const refusedTenants = new Set<string>();
    const lacking = new Set<string>();
    const out = payloads.map((p, i) => {
      // Given back as it came (the UI keeps what it knows of a claim beside it), unless opened.
      const asCame = op === 'decode' ? body.payloads[i] : toWire(p);
      if (!isSealed(p)) return asCame;
      const sealed = sealedWith(p);
      if (!sealed || !mayRead(config, who, sealed.owner, PLATFORM)) {
        seen.refused++;
        refusedTenants.add(sealed?.owner ?? '?');
        return asCame;
      }
      const key = data.keys.opening(sealed.owner, sealed.id);
      if (!key) {
        seen.refused++;
        lacking.add(`${sealed.owner}/${sealed.id}`);
        return asCame;
      }
      try {
        const opened = toWire(openSealed(p, sealed, key.bytes));
        seen.opened++;
        seen.tenants.add(sealed.owner);
        if (sealed.job) seen.jobs.add(sealed.job);
        return opened;
      } catch (err) {
        seen.refused++;
        opts.log(`a payload of ${sealed.job || sealed.owner} did not open: ${(err as Error).message}`);
        return asCame;
      }
    });
    if (seen.opened + seen.refused > 0) {
      const record: DecodeRecord = {
        at: new Date().toISOString(),
        who: answererName(who),
        issuer: who.issuer,
        subject: who.subject,
        op,
        tenants: [...seen.tenants].sort(),
        jobs: [...seen.jobs].sort(),
        opened: seen.opened,
        refused: seen.refused,
        refusedTenants: [...refusedTenants].sort(),
        ...(lacking.size ? { lacking: [...lacking].sort() } : {}),
      };
      fs.appendFileSync(opts.recordFile, `${JSON.stringify(record)}\n`, { mode: 0o600 });
    }
    if (lacking.size) opts.log(`payloads sealed with keys this inbox lacks: ${[...lacking].join(', ')}`);
    return c.json({ payloads: out });
  };

  const limit = bodyLimit({
    maxSize: maxBytes,
    onError: (c) => c.json({ error: `a codec request over ${maxBytes} bytes` }, 413),
  });
  app.post('/codec/decode', limit, handle('decode'));
  app.post('/codec/download', limit, handle('download'));
}

/** The decode record, oldest first; lines it cannot read are counted, never guessed at. */
export function readDecodeRecord(file: string): { records: DecodeRecord[]; unreadable: number } {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { records: [], unreadable: 0 };
    throw err;
  }
  const records: DecodeRecord[] = [];
  let unreadable = 0;
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    try {
      records.push(DecodeRecordSchema.parse(JSON.parse(line)));
    } catch {
      unreadable++;
    }
  }
  return { records, unreadable };
}
