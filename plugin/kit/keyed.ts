/**
 * A tool handler that honours the key: the request's key, the store's `once`, and the error results for a call
 * without a key and for a key used again with other arguments — the whole of "honours the key" in one wrapper.
 */
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { idempotencyKey, missingKey } from './keys';
import type { RequestWithMeta } from './keys';
import { KeyReuseError } from './store';
import type { KeyStore } from './store';

/**
 * Wraps `handler` so that it runs once per idempotency key:
 *
 * ```ts
 * const store = openKeyStore(process.env.CHARGES_FILE ?? 'charges.jsonl');
 * server.registerTool(
 *   'charge',
 *   { inputSchema: { order_id: z.string(), amount: z.number().int() }, ...idempotentWrite() },
 *   keyedTool(store, 'charge', async (args, extra, key) => billing.charge(args, { idempotencyKey: key })),
 * );
 * ```
 *
 * A call without a key is refused ({@link missingKey}); a key seen before is answered from the store; a key seen
 * with other arguments is refused with an error result that says so. See {@link KeyStore.once} for what is kept.
 */
export function keyedTool<A, E extends RequestWithMeta>(
  store: KeyStore<CallToolResult>,
  tool: string,
  handler: (args: A, extra: E, key: string) => CallToolResult | Promise<CallToolResult>,
): (args: A, extra: E) => Promise<CallToolResult> {
  return async (args, extra) => {
    const key = idempotencyKey(extra);
    if (key === undefined) return missingKey(tool);
    try {
      return await store.once(key, args, () => handler(args, extra, key), { tool });
    } catch (err) {
      if (err instanceof KeyReuseError) return { content: [{ type: 'text', text: err.message }], isError: true };
      throw err;
    }
  };
}
