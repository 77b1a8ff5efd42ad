import * as fs from 'node:fs';
import * as path from 'node:path';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';
import {
  IDEMPOTENCY_KEY_META,
  abortReason,
  abortableSleep,
  canonicalJson,
  idempotencyKey,
  recordReceived,
  runMain,
  serveHttp,
  toolError,
} from './common';
import type { HttpHandle, ServerFactory, ToolExtra } from './common';

/** Options for {@link createLedger}. */
export interface LedgerOptions {
  /** The JSON-lines ledger; default env `LEDGER_FILE`, else `.oz0/ledger.jsonl`, relative to the working directory. */
  file?: string;
}

/** One line of the ledger file: a write that happened, and the answer given for it. */
interface LedgerEntry {
  key: string;
  tool: string;
  args: Record<string, unknown>;
  answer: CallToolResult;
}

/** Tools that charge; `count_effects` counts their lines as charges. */
const CHARGE_TOOLS = new Set(['charge', 'slow_charge']);

/** Side-effecting tools: retrying with the same key is safe because the ledger replays the first answer. */
const WRITE_ANNOTATIONS = { idempotentHint: true, destructiveHint: false, openWorldHint: true } as const;

/** Tells oz0 (and readers of tools/list) that these tools honour `_meta["oz0/idempotency_key"]`. */
const WRITE_META = { [IDEMPOTENCY_KEY_META]: true };

const chargeOutput = { charge_id: z.string(), order_id: z.string(), amount: z.number().int() };

/** Resolves the ledger path from the options, env `LEDGER_FILE`, or the default. */
export function ledgerFile(opts?: LedgerOptions): string {
  return path.resolve(opts?.file ?? process.env.LEDGER_FILE ?? path.join('.oz0', 'ledger.jsonl'));
}

/**
 * Reads the ledger. A torn last line (the process was killed mid-append, before fsync returned and so before any
 * answer was sent) is cut off the file, so that the next append starts on a fresh line.
 */
function loadLedger(file: string): LedgerEntry[] {
  let buf: Buffer;
  try {
    buf = fs.readFileSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const end = buf.lastIndexOf(0x0a) + 1;
  if (end < buf.length) fs.truncateSync(file, end);
  return buf
    .subarray(0, end)
    .toString('utf8')
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => JSON.parse(line) as LedgerEntry);
}

/** Appends one entry and fsyncs it, so an answer is only ever sent for a write that survives a kill -9. */
function appendEntry(file: string, entry: LedgerEntry): void {
  const fd = fs.openSync(file, 'a');
  try {
    fs.writeSync(fd, JSON.stringify(entry) + '\n');
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * A ledger MCP server that honours oz0's idempotency key: the first call with a key does the write and stores the
 * answer; any later call with that key and the same arguments gets the stored answer back unchanged, and nothing is
 * written twice. The ledger file is loaded once here and shared by every server the factory makes.
 */
export function createLedger(opts?: LedgerOptions): ServerFactory {
  const file = ledgerFile(opts);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const byKey = new Map<string, LedgerEntry>();
  let charges = 0;
  for (const entry of loadLedger(file)) {
    byKey.set(entry.key, entry);
    if (CHARGE_TOOLS.has(entry.tool)) charges++;
  }

  /** The answer for a key already used: the stored one, or an error if the arguments differ. */
  const replay = (key: string, tool: string, args: Record<string, unknown>): CallToolResult | undefined => {
    const seen = byKey.get(key);
    if (!seen) return undefined;
    if (seen.tool === tool && canonicalJson(seen.args) === canonicalJson(args)) return structuredClone(seen.answer);
    return toolError(
      `idempotency key ${JSON.stringify(key)} was already used with other arguments ` +
        `(${seen.tool} ${canonicalJson(seen.args)}); refusing ${tool} ${canonicalJson(args)}`,
    );
  };

  const commit = (entry: LedgerEntry): CallToolResult => {
    appendEntry(file, entry);
    byKey.set(entry.key, entry);
    return structuredClone(entry.answer);
  };

  const newCharge = (key: string, tool: string, args: { order_id: string; amount: number }): CallToolResult => {
    charges++;
    const chargeId = `ch-${charges}`;
    return commit({
      key,
      tool,
      args,
      answer: {
        content: [{ type: 'text', text: `charged ${args.amount} to ${args.order_id} (${chargeId})` }],
        structuredContent: { charge_id: chargeId, order_id: args.order_id, amount: args.amount },
      },
    });
  };

  const missingKey = (tool: string): CallToolResult => toolError(`${tool} needs _meta["${IDEMPOTENCY_KEY_META}"]`);

  const recordAbort = (tool: string, key: string | undefined, extra: ToolExtra): void => {
    recordReceived({ event: 'cancelled', tool, key, requestId: extra.requestId, reason: abortReason(extra.signal) });
  };

  return () => {
    const server = new McpServer({ name: 'oz0-example-ledger', version: '0.1.0' });

    server.registerTool(
      'charge',
      {
        title: 'Charge an order',
        description: 'Charges amount to order_id, exactly once per _meta["oz0/idempotency_key"].',
        inputSchema: { order_id: z.string(), amount: z.number().int().positive() },
        outputSchema: chargeOutput,
        annotations: WRITE_ANNOTATIONS,
        _meta: WRITE_META,
      },
      async (args, extra) => {
        const key = idempotencyKey(extra);
        recordReceived({ tool: 'charge', key, args, requestId: extra.requestId });
        if (key === undefined) return missingKey('charge');
        return replay(key, 'charge', args) ?? newCharge(key, 'charge', args);
      },
    );

    server.registerTool(
      'set_status',
      {
        title: 'Set a status',
        description: 'Sets the status of id, exactly once per _meta["oz0/idempotency_key"].',
        inputSchema: { id: z.string(), status: z.string() },
        outputSchema: { id: z.string(), status: z.string() },
        annotations: WRITE_ANNOTATIONS,
        _meta: WRITE_META,
      },
      async (args, extra) => {
        const key = idempotencyKey(extra);
        recordReceived({ tool: 'set_status', key, args, requestId: extra.requestId });
        if (key === undefined) return missingKey('set_status');
        return (
          replay(key, 'set_status', args) ??
          commit({
            key,
            tool: 'set_status',
            args,
            answer: {
              content: [{ type: 'text', text: `${args.id} is ${args.status}` }],
              structuredContent: { id: args.id, status: args.status },
            },
          })
        );
      },
    );

    server.registerTool(
      'count_effects',
      {
        title: 'Count effects',
        description: 'Counts the writes in the ledger file: charges, statuses, and lines per idempotency key.',
        inputSchema: {},
        outputSchema: {
          charges: z.number().int(),
          statuses: z.number().int(),
          by_key: z.record(z.string(), z.number().int()),
        },
        annotations: { readOnlyHint: true, openWorldHint: false },
      },
      async (_args, extra) => {
        recordReceived({ tool: 'count_effects', key: idempotencyKey(extra), requestId: extra.requestId });
        // Re-read the file rather than trusting memory: this is the evidence that each key was written once.
        const counts = { charges: 0, statuses: 0, by_key: {} as Record<string, number> };
        for (const entry of loadLedger(file)) {
          if (CHARGE_TOOLS.has(entry.tool)) counts.charges++;
          else if (entry.tool === 'set_status') counts.statuses++;
          counts.by_key[entry.key] = (counts.by_key[entry.key] ?? 0) + 1;
        }
        return { content: [{ type: 'text', text: JSON.stringify(counts) }], structuredContent: counts };
      },
    );

    server.registerTool(
      'slow_charge',
      {
        title: 'Charge an order, slowly',
        description: 'Like charge, but waits ms first; a cancelled call writes nothing.',
        inputSchema: {
          order_id: z.string(),
          amount: z.number().int().positive(),
          ms: z.number().int().min(0).max(600_000).default(3000),
        },
        outputSchema: chargeOutput,
        annotations: WRITE_ANNOTATIONS,
        _meta: WRITE_META,
      },
      async (args, extra) => {
        const key = idempotencyKey(extra);
        recordReceived({ tool: 'slow_charge', key, args, requestId: extra.requestId });
        if (key === undefined) return missingKey('slow_charge');
        // A retry of a call that already went through answers at once, without waiting again.
        const early = replay(key, 'slow_charge', args);
        if (early) return early;
        if ((await abortableSleep(args.ms, extra.signal)) === 'aborted') {
          recordReceived({ tool: 'slow_charge', event: 'aborted', key, reason: abortReason(extra.signal) });
          recordAbort('slow_charge', key, extra);
          // The SDK sends no response for a cancelled request, so this result goes nowhere.
          return toolError(`cancelled: ${abortReason(extra.signal)}`);
        }
        // Look again: a concurrent call with the same key may have committed while this one slept.
        return replay(key, 'slow_charge', args) ?? newCharge(key, 'slow_charge', args);
      },
    );

    return server;
  };
}

/** Starts the ledger on Streamable HTTP (port 0 picks a free port). */
export async function startLedgerServer(port = 0, opts?: LedgerOptions): Promise<HttpHandle> {
  return serveHttp(createLedger(opts), port);
}

if (require.main === module) {
  runMain(createLedger()).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
