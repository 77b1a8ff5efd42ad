/**
 * Pure rules of one attempt: may this call be made again, how long may an attempt run, how an outcome maps
 * to a retry. No I/O, unit-tested on their own.
 */
import type { Tool } from '@modelcontextprotocol/sdk/types.js';
import type { ServerKind } from './servers/pool';

/** A function honours the key when its listing says `_meta["oz0/idempotency_key"] === true`. */
export function honoursKey(tool: Pick<Tool, '_meta'>): boolean {
  return tool._meta?.['oz0/idempotency_key'] === true;
}

/**
 * SPEC "Words": a call may be made again when its function only reads, or is idempotent and honours the
 * key; for a remote server only once the tenant approved that server's listing (A2).
 */
export function mayBeMadeAgain(
  tool: Pick<Tool, 'annotations' | '_meta'>,
  kind: ServerKind,
  listingApproved: boolean,
): boolean {
  if (kind === 'remote' && !listingApproved) return false;
  const hints = tool.annotations ?? {};
  return hints.readOnlyHint === true || (hints.idempotentHint === true && honoursKey(tool));
}

/** C6: the margin an attempt keeps before its tool's timeout: 2 s, or a tenth when that is under 20 s. */
export function timeLimitMarginMs(timeoutSeconds: number): number {
  return timeoutSeconds < 20 ? timeoutSeconds * 100 : 2000;
}

/** C6: how long an attempt may run, counted from when it got its slot on the node. */
export function attemptLimitMs(timeoutSeconds: number): number {
  return Math.max(1, timeoutSeconds * 1000 - timeLimitMarginMs(timeoutSeconds));
}
