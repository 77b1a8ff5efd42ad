/**
 * The idempotency key oz0 puts on every `tools/call` (SPEC K1): where it is, how to read it, and the answer to a
 * call that came without one.
 */
import type { CallToolResult } from '@modelcontextprotocol/server';

import { IDEMPOTENCY_KEY_META } from '../../model/protocol';

export { IDEMPOTENCY_KEY_META };

/**
 * The longest key the kit accepts. oz0's own keys are far shorter (a job id of at most 200 characters plus a few
 * path parts); a longer one is not oz0's, and storing it would let a caller grow the store without bound.
 */
export const MAX_KEY_LENGTH = 1024;

/**
 * What the kit reads from a request: a tool handler's second argument. On the v2 SDK (`@modelcontextprotocol/server`)
 * that is its context, whose `mcpReq._meta` is the request's `_meta`; on the 1.x SDK it is `extra`, whose `_meta` is.
 * Either satisfies this.
 */
export interface RequestWithMeta {
  mcpReq?: { _meta?: { [key: string]: unknown } };
  _meta?: { [key: string]: unknown };
}

/** The request's `_meta`, from either SDK's handler argument. */
export function requestMeta(request: RequestWithMeta): { [key: string]: unknown } | undefined {
  return request.mcpReq?._meta ?? request._meta;
}

/**
 * The request's `_meta["oz0/idempotency_key"]`: a non-empty string of at most {@link MAX_KEY_LENGTH} characters, or
 * `undefined` when the request has none (or one that is not a string).
 *
 * Treat the key as opaque. Its shape (`<job>/<activity>`, or `<job>/s<n>/<function>#<digest>/<k>` in a harness
 * session) tells a person where a call came from, but two calls are the same call exactly when their keys are equal.
 */
export function idempotencyKey(ctx: RequestWithMeta): string | undefined {
  const key = requestMeta(ctx)?.[IDEMPOTENCY_KEY_META];
  return typeof key === 'string' && key.length > 0 && key.length <= MAX_KEY_LENGTH ? key : undefined;
}

/**
 * The error result for a call of a keyed write that came without a key. Refusing is the safe answer: without a key
 * the server cannot tell a retry from a new call, so acting could do the write twice.
 */
export function missingKey(tool: string): CallToolResult {
  return { content: [{ type: 'text', text: `${tool} needs _meta["${IDEMPOTENCY_KEY_META}"]` }], isError: true };
}
