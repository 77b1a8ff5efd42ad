/**
 * Progress that survives attempts, and resume for remote servers (SPEC P2-P6). Pure: what the next attempt
 * sends and what the trace says about it.
 */
import type { ServerKind } from '../pool';
import { resumeTokenOf } from '../../model/protocol';
import { CallProgressStateSchema } from '../../model/schemas';
import type { CallProgressState, Progress } from '../../model/schemas';

/** What the attempts before this one left in the heartbeat, with a `lost` record for any that left nothing. */
export function readPriorState(details: unknown, attempt: number): CallProgressState {
  // A first attempt has no details: nothing to check (the schema's parse was ≈ 40 µs of every call, issue 36.7), and
  // nothing to fill in.
  if (details === undefined && attempt <= 1) return { attempts: [] };
  const parsed = details === undefined ? undefined : CallProgressStateSchema.safeParse(details);
  const state: CallProgressState = parsed?.success ? parsed.data : { attempts: [] };
  const attempts = state.attempts.filter((a) => a.attempt < attempt);
  const recorded = new Set(attempts.map((a) => a.attempt));
  for (let k = 1; k < attempt; k++) {
    if (!recorded.has(k))
      attempts.push({
        attempt: k,
        outcome: 'lost',
        note: "the attempt ended without a word: its node was lost or it ran past Temporal's timeout",
      });
  }
  attempts.sort((a, b) => a.attempt - b.attempt);
  return { ...state, attempts };
}

export interface ResumePlan {
  /** `_meta["oz0/resume"]` for this attempt's request (P3); none means it starts over (P4). */
  meta?: { token: string; progress: number };
  /** P5: what the trace says on this attempt. */
  note?: string;
}

/** P3-P6: whether this attempt resumes where the one before got to, and why not when it does not. */
export function resumePlan(input: {
  attempt: number;
  kind: ServerKind;
  declaresResume: boolean;
  prior: CallProgressState;
}): ResumePlan {
  const { attempt, kind, declaresResume, prior } = input;
  if (attempt <= 1) return {};
  const over = (why: string): ResumePlan => ({ note: `started over: ${why}` });
  if (kind === 'plugin') return over('a plugin server’s shared session takes no resume token');
  if (kind === 'sandbox') return over('only a remote server resumes');
  if (!declaresResume) return over('the server does not take resume');
  if (!prior.token || !prior.tokenProgress)
    return over(prior.invalidToken ? 'the token was invalid' : 'no token reported');
  const { progress, total } = prior.tokenProgress;
  return {
    meta: { token: prior.token, progress },
    note: `resumed from progress ${progress}${total === undefined ? '' : ` of ${total}`}`,
  };
}

/** P5: the trace's word for an attempt that was sent a resume token it could not take. */
export const IGNORED_TOKEN = 'ignored an invalid resume token';

/** A progress notification for an attempt's request, as the MCP client hears it. */
export interface ProgressNote {
  progress: number;
  total?: number;
  _meta?: Record<string, unknown>;
}

/** What a progress notification changes: the attempt's progress, and what its heartbeat carries of it. */
export interface Progressed {
  progress: Progress;
  carried: Pick<CallProgressState, 'progress' | 'total' | 'token' | 'tokenProgress' | 'invalidToken'>;
  /** P3: the notification's resume token was invalid, and was ignored. */
  invalidToken: boolean;
}

/**
 * P1, P3: a progress notification for an attempt's request, after `seen`; none when it is no news (progress must
 * increase within one request). Its resume token counts only from a function that takes tokens (`takesTokens`).
 */
export function progressed(seen: Progress | undefined, n: ProgressNote, takesTokens: boolean): Progressed | undefined {
  if (!Number.isFinite(n.progress) || (seen && n.progress <= seen.progress)) return undefined;
  const progress = typeof n.total === 'number' ? { progress: n.progress, total: n.total } : { progress: n.progress };
  const carried: Progressed['carried'] = { progress: progress.progress, total: progress.total };
  const token = takesTokens ? resumeTokenOf(n._meta) : undefined;
  if (token && 'token' in token) Object.assign(carried, { token: token.token, tokenProgress: progress });
  else if (token) carried.invalidToken = true;
  return { progress, carried, invalidToken: carried.invalidToken === true };
}
