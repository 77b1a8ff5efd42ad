import * as path from 'node:path';
import { McpServer } from '@modelcontextprotocol/server';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { idempotentWrite, keyedTool, openKeyStore, readKeyStore, readOnly } from '../plugin';
import { abortReason, abortableSleep, idempotencyKey, recordReceived, runMain, serveHttp, traceOf } from './common';
import type { HttpHandle, ServerFactory, ToolContext } from './common';

/** Options for {@link createLedger}. */
export interface LedgerOptions {
  /** The ledger's key store; default env `LEDGER_FILE`, else `.oz0/ledger.db`, relative to the working directory. */
  file?: string;
}

/** Tools that charge; `count_effects` counts their lines as charges. */
const CHARGE_TOOLS = new Set(['charge', 'slow_charge']);

/** Side-effecting tools: retrying with the same key is safe because the ledger replays the first answer. */
const WRITE = idempotentWrite({ openWorld: true });

const chargeOutput = { charge_id: z.string(), order_id: z.string(), amount: z.number().int() };

/** Resolves the ledger path from the options, env `LEDGER_FILE`, or the default. */
export function ledgerFile(opts?: LedgerOptions): string {
  return path.resolve(opts?.file ?? process.env.LEDGER_FILE ?? path.join('.oz0', 'ledger.db'));
}

/**
 * A ledger MCP server that honours oz0's idempotency key, on the plugin kit's key store: the first call with a key
 * does the write and keeps the answer, one record `{ key, tool, args, answer }` committed (fsync'd) before it is
 * sent; any later call with that key and the same arguments gets the kept answer back unchanged, and nothing is
 * written twice, across restarts and across the processes that share the file. The store is opened once here and
 * shared by every server the factory makes.
 *
 * The ledger's charges are its records: a run whose process died before its record (a run the store reports as
 * `interrupted`) charged nothing, so the ledger charges again without asking. A server whose write goes to a
 * service would ask that service first, by the key.
 */
export function createLedger(opts?: LedgerOptions): ServerFactory {
  const file = ledgerFile(opts);
  const store = openKeyStore(file);
  // Charge numbers go on from the file. They are this process's count: two processes sharing one ledger may give one
  // number twice (never one key two charges); a real ledger takes its ids from the service that charges.
  let charges = store.records().filter((r) => r.tool !== undefined && CHARGE_TOOLS.has(r.tool)).length;

  /** The answer of a new charge; the store writes it down before anyone sees it. */
  const newCharge = (args: { order_id: string; amount: number }): CallToolResult => {
    const chargeId = `ch-${++charges}`;
    return {
      content: [{ type: 'text', text: `charged ${args.amount} to ${args.order_id} (${chargeId})` }],
      structuredContent: { charge_id: chargeId, order_id: args.order_id, amount: args.amount },
    };
  };

  const charge = keyedTool(store, 'charge', (args: { order_id: string; amount: number }) => newCharge(args));

  const refund = keyedTool(store, 'refund', (args: { order_id: string; amount: number }) => {
    const refundId = `rf-${store.records().filter((r) => r.tool === 'refund').length + 1}`;
    return {
      content: [{ type: 'text', text: `refunded ${args.amount} to ${args.order_id} (${refundId})` }],
      structuredContent: { refund_id: refundId, order_id: args.order_id, amount: args.amount },
    };
  });

  /** What the ledger holds for an order: the sum charged, the sum refunded, and its last status. */
  const lookup = (orderId: string) => {
    let charged = 0;
    let refunded = 0;
    let status: string | null = null;
    for (const r of store.records()) {
      const args = r.args as { order_id?: string; id?: string; amount?: number; status?: string };
      if (r.tool !== undefined && CHARGE_TOOLS.has(r.tool) && args.order_id === orderId) charged += args.amount ?? 0;
      else if (r.tool === 'refund' && args.order_id === orderId) refunded += args.amount ?? 0;
      else if (r.tool === 'set_status' && args.id === orderId) status = args.status ?? null;
    }
    return { order_id: orderId, charged, refunded, status };
  };

  const setStatus = keyedTool(store, 'set_status', (args: { id: string; status: string }) => ({
    content: [{ type: 'text', text: `${args.id} is ${args.status}` }],
    structuredContent: { id: args.id, status: args.status },
  }));

  const slowCharge = keyedTool(
    store,
    'slow_charge',
    async (args: { order_id: string; amount: number; ms: number }, ctx: ToolContext, key: string) => {
      if ((await abortableSleep(args.ms, ctx.mcpReq.signal)) === 'aborted') {
        const reason = abortReason(ctx.mcpReq.signal);
        recordReceived({ tool: 'slow_charge', event: 'aborted', key, reason });
        recordReceived({ event: 'cancelled', tool: 'slow_charge', key, requestId: ctx.mcpReq.id, reason });
        // Nothing was charged, so throw: the store keeps nothing, and a retry under this key charges. (The SDK
        // sends no response for a cancelled request, so the caller never sees this error.)
        throw new Error(`cancelled: ${reason}`);
      }
      return newCharge(args);
    },
  );

  return () => {
    const server = new McpServer({ name: 'oz0-example-ledger', version: '0.1.0' });

    server.registerTool(
      'charge',
      {
        title: 'Charge an order',
        description: 'Charges amount to order_id, exactly once per _meta["oz0/idempotency_key"].',
        inputSchema: z.object({ order_id: z.string(), amount: z.number().int().positive() }),
        outputSchema: z.object(chargeOutput),
        ...WRITE,
      },
      async (args, ctx) => {
        recordReceived({ tool: 'charge', key: idempotencyKey(ctx), args, requestId: ctx.mcpReq.id, ...traceOf(ctx) });
        return charge(args, ctx);
      },
    );

    server.registerTool(
      'set_status',
      {
        title: 'Set a status',
        description: 'Sets the status of id, exactly once per _meta["oz0/idempotency_key"].',
        inputSchema: z.object({ id: z.string(), status: z.string() }),
        outputSchema: z.object({ id: z.string(), status: z.string() }),
        ...WRITE,
      },
      async (args, ctx) => {
        recordReceived({ tool: 'set_status', key: idempotencyKey(ctx), args, requestId: ctx.mcpReq.id });
        return setStatus(args, ctx);
      },
    );

    server.registerTool(
      'lookup_order',
      {
        title: 'Look an order up',
        description: 'What the ledger holds for order_id: the sum charged, the sum refunded, its last status.',
        inputSchema: z.object({ order_id: z.string() }),
        outputSchema: z.object({
          order_id: z.string(),
          charged: z.number().int(),
          refunded: z.number().int(),
          status: z.string().nullable(),
        }),
        ...readOnly({ openWorld: false }),
      },
      async (args, ctx) => {
        recordReceived({
          tool: 'lookup_order',
          key: idempotencyKey(ctx),
          args,
          requestId: ctx.mcpReq.id,
          ...traceOf(ctx),
        });
        const found = lookup(args.order_id);
        return { content: [{ type: 'text', text: JSON.stringify(found) }], structuredContent: found };
      },
    );

    server.registerTool(
      'refund',
      {
        title: 'Refund an order',
        description: 'Refunds amount to order_id, exactly once per _meta["oz0/idempotency_key"].',
        inputSchema: z.object({ order_id: z.string(), amount: z.number().int().positive() }),
        outputSchema: z.object({ refund_id: z.string(), order_id: z.string(), amount: z.number().int() }),
        ...WRITE,
      },
      async (args, ctx) => {
        recordReceived({ tool: 'refund', key: idempotencyKey(ctx), args, requestId: ctx.mcpReq.id, ...traceOf(ctx) });
        return refund(args, ctx);
      },
    );

    server.registerTool(
      'count_effects',
      {
        title: 'Count effects',
        description: 'Counts the writes in the ledger file: charges, refunds, statuses, and lines per idempotency key.',
        inputSchema: z.object({}),
        outputSchema: z.object({
          charges: z.number().int(),
          refunds: z.number().int(),
          statuses: z.number().int(),
          by_key: z.record(z.string(), z.number().int()),
        }),
        ...readOnly({ openWorld: false }),
      },
      async (_args, ctx) => {
        recordReceived({ tool: 'count_effects', key: idempotencyKey(ctx), requestId: ctx.mcpReq.id });
        // Read the file afresh, on a connection of its own, as a second reader would: the evidence of each write.
        const counts = { charges: 0, refunds: 0, statuses: 0, by_key: {} as Record<string, number> };
        for (const entry of readKeyStore(file)) {
          if (entry.tool !== undefined && CHARGE_TOOLS.has(entry.tool)) counts.charges++;
          else if (entry.tool === 'refund') counts.refunds++;
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
        inputSchema: z.object({
          order_id: z.string(),
          amount: z.number().int().positive(),
          ms: z.number().int().min(0).max(600_000).default(3000),
        }),
        outputSchema: z.object(chargeOutput),
        ...WRITE,
      },
      async (args, ctx) => {
        const key = idempotencyKey(ctx);
        recordReceived({ tool: 'slow_charge', key, args, requestId: ctx.mcpReq.id });
        // A retry of a call that already went through answers at once, without waiting again; one that comes while
        // the first is still sleeping waits for it.
        const answer = await slowCharge(args, ctx);
        recordReceived({ tool: 'slow_charge', event: 'answered', key, requestId: ctx.mcpReq.id });
        return answer;
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
