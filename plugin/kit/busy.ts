/**
 * A busy service (SPEC B1): an error result that says so in the `_meta` oz0 reads. The server answers it and never
 * waits and retries inside the tool (B5): oz0's retry is the only one.
 */
import type { CallToolResult } from '@modelcontextprotocol/server';
import { RETRY_AFTER_META, RETRYABLE_META, busyOf } from '../../model/protocol';

export { RETRY_AFTER_META, RETRYABLE_META };

/**
 * The answer for a call whose service is busy: `isError: true` with `_meta["oz0/retryable"]: true` and, when given,
 * `_meta["oz0/retry_after"]` in seconds (from the provider's Retry-After).
 *
 * oz0 tries the call again after the wait, under the same key, only when the function may be made again (it only
 * reads, or it says `idempotentHint: true` and honours the key), it has attempts left, and the wait is at most 60 s
 * (B2). Otherwise the job gets this result as an ordinary error, so write `text` for the model that reads it (B3).
 *
 * @param retryAfter - seconds to wait; a wait that is not a finite number of seconds, or is negative, is a bug in
 *   the caller, and throws rather than telling oz0 something it would ignore.
 */
export function busy(retryAfter?: number, text?: string): CallToolResult {
  if (retryAfter !== undefined && !(Number.isFinite(retryAfter) && retryAfter >= 0)) {
    throw new RangeError(`busy(): retryAfter is seconds, a finite number >= 0, not ${retryAfter}`);
  }
  const wait = retryAfter === undefined ? '' : ` in ${retryAfter} s`;
  return {
    content: [{ type: 'text', text: text ?? `The service is busy; try again later${wait} (retryable).` }],
    isError: true,
    _meta: { [RETRYABLE_META]: true, ...(retryAfter !== undefined && { [RETRY_AFTER_META]: retryAfter }) },
  };
}

/** Whether a result is a busy answer (B1). The key store never keeps one: nothing was done, so a retry must act. */
export function isBusy(result: unknown): boolean {
  return busyOf(result) !== undefined;
}
