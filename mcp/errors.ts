/** Why an attempt could not reach its server, as facts the attempt reads: error classes, never flags on an Error. */
import { causesOf } from '../common/causes';

/** Nothing of the call was sent: the server could not be started or reached. Any call may try again. */
export class NothingSent extends Error {
  override name = 'NothingSent';
}

/**
 * S2: the server cannot start, and will not until its config or the node changes — a sandbox refused for its grants
 * or limits, a program or script that is not there: nothing was sent, and another try would fail the same way.
 */
export class CannotStart extends NothingSent {
  override name = 'CannotStart';
}

export { causesOf };

/** Whether a failure to start is one no other try gets past (see {@link CannotStart}), read from it and its causes. */
export function lastingStartFailure(err: unknown): boolean {
  for (const e of causesOf(err)) {
    if (e instanceof CannotStart || e.name === 'IsolationRefused') return true;
    const { code, syscall } = e as NodeJS.ErrnoException;
    if ((code === 'ENOENT' || code === 'EACCES') && syscall?.startsWith('spawn')) return true;
  }
  return false;
}

/**
 * The call may or may not have been made: its request was sent (or the session it rode on broke) and no answer
 * came. Only a call that may be made again tries again.
 */
export class OutcomeUnknown extends Error {
  override name = 'OutcomeUnknown';
}

/** R4: how an attempt ends for a failure of authorization: busy (SPEC B) or failed, and why, in the trace's words. */
export interface AuthorizationEnd {
  busy: boolean;
  note: string;
  /** The authorization server's Retry-After, in seconds. */
  retryAfter?: number;
}

/**
 * R4: the server could not be authorized for the tenant, so nothing of the call was sent: its authorization server
 * was down or busy (SPEC B), or refused the tenant's client, or the server refused every token it was given.
 */
export class NotAuthorized extends NothingSent {
  override name = 'NotAuthorized';
  constructor(readonly end: AuthorizationEnd) {
    super(end.note);
  }
}
