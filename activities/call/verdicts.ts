/**
 * Pure rules of one attempt: may this call be made again, how long may an attempt run, how an outcome maps
 * to a retry. No I/O, unit-tested on their own.
 */
import type { Tool } from '@modelcontextprotocol/client';
import { honoursKey } from '../../model/protocol';
import type { ServerKind } from '../pool';

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

/** B2/B3: a busy server's wait above which oz0 does not retry: the job reads the error instead. */
export const MAX_BUSY_WAIT_SECONDS = 60;

/**
 * A wait in words, as a person (or a model) reads it: as the server gave it, to the second, under 10 minutes (a
 * server that asked for 90 seconds is not told "2 minutes"); in minutes, then hours, beyond.
 */
export function waitInWords(seconds: number): string {
  if (seconds < 1) return 'less than a second';
  const s = Math.round(seconds);
  if (s < 600) return `${s} second${s === 1 ? '' : 's'}`;
  if (s < 5400) return `${Math.round(s / 60)} minutes`;
  const hours = Math.round(s / 360) / 10;
  return `${hours} hours`;
}

export type BusyVerdict =
  | { retry: true; delayMs?: number; note: string }
  | { retry: false; note: string; words: string };

/**
 * B2/B3: a busy call that may be made again, with attempts left and a wait of at most a minute, is tried
 * again after the wait (or the retry policy's backoff); any other ends with the server's error, the wait in words.
 */
export function busyVerdict(input: { again: boolean; lastAttempt: boolean; retryAfter?: number }): BusyVerdict {
  const { again, lastAttempt, retryAfter } = input;
  const wait = retryAfter === undefined ? undefined : waitInWords(retryAfter);
  if (again && !lastAttempt && (retryAfter === undefined || retryAfter <= MAX_BUSY_WAIT_SECONDS)) {
    return retryAfter === undefined
      ? { retry: true, note: 'busy: tried again after the retry policy’s backoff' }
      : {
          retry: true,
          delayMs: Math.round(retryAfter * 1000),
          note: `busy: tried again after the server’s wait of ${wait}`,
        };
  }
  const why = !again
    ? 'this call gets one attempt'
    : lastAttempt
      ? 'that was the last attempt'
      : `the wait it asked for is over oz0’s limit of ${MAX_BUSY_WAIT_SECONDS} seconds`;
  const words = `The service is busy${wait ? ` and asked to wait ${wait}` : ''}; oz0 did not try again (${why}).`;
  return { retry: false, note: `busy: not tried again: ${why}`, words };
}
