/**
 * SPEC R4 in one attempt: how it ends when the tenant's authorization at a remote server failed, which is always
 * before anything of the call was made (a token that could not be had, or a server that refused the call's request
 * before running it). An authorization server that is down or busy makes the call busy (SPEC B: tried again after
 * its wait, or ended with the wait in words); any other failure ends the call, saying which. Pure: unit-tested.
 */
import { FailureType } from '../../model/activities';
import type { Outcome } from '../../model/schemas';
import { NotAuthorized } from '../../mcp';
import type { AuthorizationEnd, TenantCredential } from '../../mcp';
import { busyVerdict } from './verdicts';

/** What the failure of an attempt says about its authorization, if anything: the pool's words, or the credential's. */
export function authorizationEndOf(
  err: unknown,
  credential: TenantCredential | undefined,
): AuthorizationEnd | undefined {
  if (err instanceof NotAuthorized) return err.end;
  return credential?.end(err);
}

/** How the attempt ends: its outcome and note, and what Temporal is told. */
export interface AuthorizationVerdict {
  outcome: Outcome;
  note: string;
  failure: { type: string; retryable: boolean; message: string; nextRetryDelayMs?: number };
}

export function authorizationVerdict(end: AuthorizationEnd, tool: string, lastAttempt: boolean): AuthorizationVerdict {
  const note = `${end.note}; nothing was sent`;
  if (!end.busy) {
    return {
      outcome: 'failed',
      note,
      failure: { type: FailureType.attemptFailed, retryable: false, message: `${tool}: ${note}` },
    };
  }
  // Nothing was sent, so any call may be tried again (B2's "may be made again" holds whatever its hints).
  const busy = busyVerdict({ again: true, lastAttempt, retryAfter: end.retryAfter });
  const how = busy.note.replace(/^busy: /, '');
  return {
    outcome: 'busy',
    note: `${note}; ${how}`,
    failure: busy.retry
      ? {
          type: FailureType.busy,
          retryable: true,
          message: `${tool}: ${note}`,
          ...(busy.delayMs !== undefined && { nextRetryDelayMs: busy.delayMs }),
        }
      : { type: FailureType.busy, retryable: false, message: `${tool}: ${note}. ${busy.words}` },
  };
}
