/**
 * A tool handler that honours the key: the request's key, the store's `once`, and the answers for a call without a
 * key, for a key used again with other arguments, and for a key another attempt is still running — the whole of
 * "honours the key" in one wrapper.
 */
import type { CallToolResult } from '@modelcontextprotocol/server';
import { busy } from './busy';
import { idempotencyKey, missingKey } from './keys';
import type { RequestWithMeta } from './keys';
import { KeyBusyError, KeyReuseError } from './store';
import type { KeyStore, OnceRun } from './store';

/**
 * Wraps `handler` so that it runs once per idempotency key:
 *
 * ```ts
 * const store = openKeyStore(process.env.CHARGES_FILE ?? 'charges.db');
 * server.registerTool(
 *   'charge',
 *   { inputSchema: { order_id: z.string(), amount: z.number().int() }, ...idempotentWrite() },
 *   keyedTool(store, 'charge', async (args, extra, key, run) => {
 *     // An earlier run of this key died before its answer was kept: ask the provider, by the key, what it did.
 *     const earlier = run.interrupted ? await billing.findCharge({ idempotencyKey: key }) : undefined;
 *     return toResult(earlier ?? (await billing.charge(args, { idempotencyKey: key })));
 *   }),
 * );
 * ```
 *
 * A call without a key is refused ({@link missingKey}); a key seen before is answered from the store; a key seen
 * with other arguments is refused with an error result that says so; a key whose run (here or in another process) is
 * still going past the store's `waitMs` gets {@link busy} with the store's `retryAfterSeconds`, so oz0 tries it
 * again later (B2) and then gets that run's answer. See {@link KeyStore.once} for what is kept, and for
 * `run.interrupted`.
 */
export function keyedTool<A, E extends RequestWithMeta>(
  store: KeyStore<CallToolResult>,
  tool: string,
  handler: (args: A, extra: E, key: string, run: OnceRun) => CallToolResult | Promise<CallToolResult>,
): (args: A, extra: E) => Promise<CallToolResult> {
  return async (args, extra) => {
    const key = idempotencyKey(extra);
    if (key === undefined) return missingKey(tool);
    try {
      return await store.once(key, args, (run) => handler(args, extra, key, run), { tool });
    } catch (err) {
      if (err instanceof KeyReuseError) return { content: [{ type: 'text', text: err.message }], isError: true };
      if (err instanceof KeyBusyError) return busy(err.retryAfter, `${tool}: ${err.message}`);
      throw err;
    }
  };
}
