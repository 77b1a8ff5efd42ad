/**
 * Progress that survives attempts, and resume for remote servers (SPEC P2-P6). Pure: what the next attempt
 * sends and what the trace says about it.
 */
import type { CallProgressState } from '../workflows/definitions';
import type { ServerKind } from './servers/pool';

/** P3: letters, digits and `._:~+/=-`, 1-256 characters. */
export const RESUME_TOKEN = /^[A-Za-z0-9._:~+/=-]{1,256}$/;

/** The resume token a progress notification carries in `_meta["oz0/resume"]`: valid, invalid, or none. */
export function resumeTokenOf(meta: unknown): { token: string } | { invalid: true } | undefined {
  const value = (meta as Record<string, unknown> | undefined)?.['oz0/resume'];
  if (value === undefined) return undefined;
  return typeof value === 'string' && RESUME_TOKEN.test(value) ? { token: value } : { invalid: true };
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
