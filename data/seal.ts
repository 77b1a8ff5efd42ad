/**
 * SPEC D4: every payload of a tenant's jobs sealed with that tenant's key, the platform's own workflows' with the
 * platform's — a payload codec, on Temporal's own codec chain, so that history, queries, Updates, failures' details
 * and the store's objects (stored after it) all hold ciphertext. A payload is compressed, then sealed with AES-256-GCM
 * (Node's crypto) under a fresh 96-bit IV:
 *
 *   metadata: { encoding: "binary/oz0-sealed", oz0-key: "<owner>/<key id>", oz0-owner: "<owner>", oz0-job: "<id>" }
 *   data:     [1: version][1: 1 when deflated][12: IV][16: GCM tag][ciphertext of the payload as protobuf]
 *
 * The owner's name, the key id and the workflow's id are not the tenant's data (`Oz0Tenant` and the id say as much in
 * the clear); everything else is. They are bound in as additional data, so a payload moved to another job or owner no
 * longer opens, and the codec server records the job each decode was of. A payload not sealed (a job of an older oz0,
 * or of a node with sealing off) is read as it is. A process without the key a payload names fails that one read,
 * naming the key; it never fails a node.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import zlib from 'node:zlib';
import { temporal } from '@temporalio/proto';
import type { Payload, PayloadCodec, SerializationContext } from '@temporalio/common';
import { KeyMissing } from './keys';
import type { KeyRing } from './keys';
import { OWNER_METADATA, PLATFORM, isOwner } from './owners';
import type { PayloadOwners } from './owners';
import { jsonOf } from './owner-of';

export const SEALED = 'binary/oz0-sealed';
export const KEY_METADATA = 'oz0-key';
export const JOB_METADATA = 'oz0-job';
const VERSION = 1;
/**
 * A payload smaller than this is sealed as it is: a call's small payloads (its input, a heartbeat, a status) would
 * save a few hundred bytes each for ~20 µs of deflate apiece, several times a call (D7's small call, ≤ 1.03×).
 */
const WORTH_DEFLATING = 2048;
/**
 * Past this, a payload is sealed as it is: it goes to the payload store (D2) whatever its size, and deflating 10 MiB
 * costs 100-200 ms on the call's path (D7 asks ≤ 1.1× for a 10 MiB answer; AES-GCM alone is ~3 ms a MiB).
 */
export const DEFLATE_UP_TO = 1024 * 1024;

const PayloadProto = temporal.api.common.v1.Payload;
const SEALED_BYTES = Buffer.from(SEALED);

function text(bytes: Uint8Array | null | undefined): string | undefined {
  return bytes ? Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8') : undefined;
}

/** Whether a payload is one this codec sealed. */
export function isSealed(payload: Payload): boolean {
  const encoding = payload.metadata?.encoding;
  return encoding !== undefined && encoding !== null && Buffer.compare(Buffer.from(encoding), SEALED_BYTES) === 0;
}

/** The owner, key id and job a sealed payload names. */
export function sealedWith(payload: Payload): Sealed | undefined {
  const named = text(payload.metadata?.[KEY_METADATA]);
  const at = named?.lastIndexOf('/') ?? -1;
  if (!named || at <= 0) return undefined;
  const owner = named.slice(0, at);
  const id = named.slice(at + 1);
  const job = text(payload.metadata?.[JOB_METADATA]) ?? '';
  return isOwner(owner) && /^[0-9a-f]{16}$/.test(id) ? { owner, id, job } : undefined;
}

/** What a sealed payload says of itself in the clear: whose, under which of its keys, of which workflow. */
export interface Sealed {
  owner: string;
  id: string;
  /** The workflow it was sealed for ('' when its writer did not say). */
  job: string;
}

export class SealCodec implements PayloadCodec {
  private readonly sealsNew: boolean;

  constructor(
    private readonly keys: KeyRing,
    private readonly owners: PayloadOwners,
    opts: { sealsNew?: boolean } = {},
  ) {
    this.sealsNew = opts.sealsNew ?? true;
  }

  async encode(payloads: Payload[], context?: SerializationContext): Promise<Payload[]> {
    if (!this.sealsNew || payloads.length === 0 || payloads.every(isSealed)) return payloads;
    const workflowId = context?.workflowId;
    // Whose: the workflow's owner as this process knows it, or as the payloads (a spec, a call's input) say; a
    // payload whose owner nothing tells is the platform's to keep.
    const owner = (workflowId ? await this.owners.of(workflowId, () => payloads.map(jsonOf)) : undefined) ?? PLATFORM;
    const key = this.keys.sealing(owner);
    return payloads.map((p) => (isSealed(p) ? p : seal(p, { owner, id: key.id, job: workflowId ?? '' }, key.bytes)));
  }

  async decode(payloads: Payload[], context?: SerializationContext): Promise<Payload[]> {
    const workflowId = context?.workflowId;
    if (workflowId && !payloads.every(isSealed)) {
      this.owners.learnFrom(workflowId, () => payloads.filter((p) => !isSealed(p)).map(jsonOf));
    }
    return payloads.map((p) => {
      if (!isSealed(p)) return p;
      const named = sealedWith(p);
      if (!named) throw new Error('a sealed payload that names no key');
      // A process learns whose a job is from what it reads, and seals what it writes back for it the same way.
      if (context?.workflowId) this.owners.learn(context.workflowId, named.owner);
      const key = this.keys.opening(named.owner, named.id);
      if (!key) {
        throw new KeyMissing(
          `a payload sealed with ${named.owner}'s key ${named.id}, which this process does not have (tenants.${named.owner}.keys, or payloads.seal.folder)`,
        );
      }
      return open(p, named, key.bytes);
    });
  }
}

function aad({ owner, id, job }: Sealed): Buffer {
  return Buffer.from(JSON.stringify([SEALED, owner, id, job]));
}

/** A payload sealed: its protobuf, deflated when that pays, under AES-256-GCM. */
export function seal(payload: Payload, sealed: Sealed, key: Buffer): Payload {
  const plain = Buffer.from(PayloadProto.encode(payload).finish());
  const deflated =
    plain.length >= WORTH_DEFLATING && plain.length <= DEFLATE_UP_TO
      ? zlib.deflateRawSync(plain, { level: zlib.constants.Z_DEFAULT_COMPRESSION })
      : undefined;
  const body = deflated && deflated.length < plain.length ? deflated : plain;
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(aad(sealed));
  const ciphertext = Buffer.concat([cipher.update(body), cipher.final()]);
  const head = Buffer.from([VERSION, body === deflated ? 1 : 0]);
  return {
    metadata: {
      encoding: SEALED_BYTES,
      [KEY_METADATA]: Buffer.from(`${sealed.owner}/${sealed.id}`),
      [OWNER_METADATA]: Buffer.from(sealed.owner),
      ...(sealed.job ? { [JOB_METADATA]: Buffer.from(sealed.job) } : {}),
    },
    data: Buffer.concat([head, iv, cipher.getAuthTag(), ciphertext]),
  };
}

/** A sealed payload opened: checked by GCM against its key, its owner and its job, then inflated and decoded. */
export function open(payload: Payload, sealed: Sealed, key: Buffer): Payload {
  const raw = payload.data ?? new Uint8Array();
  const data = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
  if (data.length < 30 || data[0] !== VERSION) throw new Error('a sealed payload of a form this process does not read');
  const decipher = createDecipheriv('aes-256-gcm', key, data.subarray(2, 14));
  decipher.setAAD(aad(sealed));
  decipher.setAuthTag(data.subarray(14, 30));
  let body: Buffer;
  try {
    body = Buffer.concat([decipher.update(data.subarray(30)), decipher.final()]);
  } catch {
    throw new Error(
      `a sealed payload that ${sealed.owner}'s key ${sealed.id} does not open: changed, or moved from another job`,
    );
  }
  const plain = data[1] === 1 ? zlib.inflateRawSync(body) : body;
  return PayloadProto.decode(plain);
}
