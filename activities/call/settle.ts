/**
 * Settle's rules: how one attempt ends, decided from what it knows (B2-B5, C1-C7, T3). Pure: each returns an
 * {@link Ending}, which the attempt carries out (./attempt.ts): the steps it takes first, its line in the trace, and
 * what Temporal is told (an answer, a retry, or the end). Unit-tested on their own, table by table.
 */
import type { CallToolResult } from '@modelcontextprotocol/client';
import { busyOf, withoutReservedMeta } from '../../model/protocol';
import type { AttemptRecord, CallProgressState, Outcome, Progress } from '../../model/schemas';
import { FailureType } from '../../model/activities';
import type { CallOutput } from '../../model/activities';
import { busyVerdict } from './verdicts';
import { sizeInWords } from '../../common/sizes';
import type { StopCause } from './stops';

/** What an attempt that ends without an answer for the job tells Temporal. */
export interface Failure {
  type: string;
  retryable: boolean;
  /** The failure's message; the trace's note when none. */
  message?: string;
  /** B2: Temporal makes the next attempt after this wait, the busy server's own (none: the retry policy's backoff). */
  nextRetryDelayMs?: number;
}

/** What the attempt does before its line is written: each is a fact the next attempt reads, or a clean-up. */
export interface Steps {
  /** Nothing of the call was sent: the next attempt may go ahead whatever the function's hints (`unsent`). */
  unsent?: true;
  /** The call's task is gone from its server: the next attempt starts without it. */
  forgetTask?: true;
  /** The call's task is cancelled on its server: nobody will poll it again. */
  cancelTask?: true;
  /** C3: the call's sandboxed server is stopped, its whole process tree (C7: before the next attempt). */
  stopSandbox?: true;
}

/**
 * How an attempt ends: its steps, its line in the trace (outcome and note), and what Temporal is told: the job's
 * answer, a failure (retryable or not), or a cancellation (C1).
 */
export type Ending = Steps & { outcome: Outcome; note?: string } & (
    | { answer: CallToolResult }
    | { failure: Failure }
    | { cancelled: true }
  );

/** An attempt that prepare ended before anything was sent: its ending, decided there. */
export class AttemptEnd extends Error {
  readonly ending: Ending & { failure: Failure };

  constructor(outcome: Outcome, note: string, failure: Failure, steps: Steps = {}) {
    super(failure.message ?? note);
    this.ending = { ...steps, outcome, note, failure };
  }
}

/** A stop came while the attempt prepared: nothing was sent, and settle reads why from the stop's cause. */
export class StoppedBeforeSend extends Error {
  constructor() {
    super('stopped before the request was sent');
  }
}

/** An end before anything was sent: any call may try again, and the next attempt knows it may (`unsent`). */
export class Unsent extends AttemptEnd {
  constructor(note: string, message: string) {
    super('failed', note, { type: FailureType.attemptFailed, retryable: true, message }, { unsent: true });
  }
}

/** What settle reads of an attempt. */
export interface AttemptFacts {
  /** `server.function` and the call's key, for the failure's message. */
  tool: string;
  key: string;
  /** SPEC "Words": this call may be made again; known once prepare has read the listing and the policy. */
  again: boolean;
  /** Temporal makes no attempt after this one. */
  last: boolean;
  /** The request went out. */
  sent: boolean;
  /** The call runs as a task, made by this attempt or one before: a next attempt polls it. */
  task: boolean;
  /** The function only reads: a task of it that its server lost may be made anew. */
  readOnly: boolean;
  /** The call's server runs in a sandbox of this node. */
  sandbox: boolean;
}

/** What settle reads of an answer: its size (as its server sent it, or as it was dropped) and the node's bound. */
export interface AnswerFacts {
  bytes: number;
  maxBytes: number;
  /** The bound in words, when it is not node.maxResultMiB's (no payload store: what Temporal's history takes). */
  bound?: string;
}

/**
 * An answer came: one past the node's bound is an error result naming its size and the bound (D1: the same call would
 * answer the same again, so there is no next attempt), a busy one is B2/B3, any other goes to the job.
 */
export function settleAnswer(
  result: CallToolResult,
  facts: Pick<AttemptFacts, 'tool' | 'again' | 'last'> & AnswerFacts,
): Ending {
  if (facts.bytes > facts.maxBytes) {
    const size = sizeInWords(facts.bytes);
    const bound = facts.bound ?? `oz0's bound of ${sizeInWords(facts.maxBytes)} on an answer (node.maxResultMiB)`;
    const text = facts.again
      ? `oz0: ${facts.tool} answered ${size}, past ${bound}; the answer was dropped. Ask for less at a time.`
      : `oz0: ${facts.tool} did its work and answered ${size}, past ${bound}; the answer was dropped, and the call is ` +
        'not made again: what it did stands. Ask for less at a time.';
    const note = facts.again
      ? `the answer was ${size}, past ${bound}: dropped`
      : `the server did its work and answered ${size}, past ${bound}: the answer was dropped, and the call is not made again`;
    return { outcome: 'failed', note, answer: { isError: true, content: [{ type: 'text', text }] } };
  }
  const busy = busyOf(result);
  if (busy) return settleBusy(result, busy.retryAfter, facts);
  return { outcome: result.isError ? 'error' : 'ok', answer: result };
}

/**
 * D2, D3: an answer that could not be kept in the payload store: the server did its work, yet the job cannot have
 * its answer; a call that may be made again tries again, any other ends here, never made again.
 */
export function settleUnkept(err: unknown, facts: Pick<AttemptFacts, 'tool' | 'key' | 'again' | 'last'>): Ending {
  const why = `its answer could not be stored: ${(err as Error).message ?? String(err)}`;
  return {
    outcome: 'failed',
    note: facts.again ? `the server answered, but ${why}` : `the server did its work, but ${why}; not made again`,
    failure: {
      type: facts.again ? FailureType.attemptFailed : FailureType.mayHaveRun,
      retryable: facts.again,
      message: `${facts.tool} (key ${facts.key}) answered, but ${why}`,
    },
  };
}

/** B2/B3: a busy server: try again after its wait, or hand its error to the job with the wait in words. */
export function settleBusy(
  result: CallToolResult,
  retryAfter: number | undefined,
  facts: Pick<AttemptFacts, 'tool' | 'again' | 'last'>,
): Ending {
  const busy = busyVerdict({ again: facts.again, lastAttempt: facts.last, retryAfter });
  if (busy.retry) {
    // One retry layer (B5): Temporal waits, not oz0; maximumInterval is 60 s so this delay is never cut short.
    return {
      outcome: 'busy',
      note: busy.note,
      failure: {
        type: FailureType.busy,
        retryable: true,
        message: `${facts.tool}: the server is busy; ${busy.note.replace(/^busy: /, '')}`,
        nextRetryDelayMs: busy.delayMs,
      },
    };
  }
  const content = [...(result.content ?? []), { type: 'text' as const, text: busy.words }];
  return { outcome: 'busy', note: busy.note, answer: { ...result, content } };
}

/** An attempt that a stop ended: cancelled, killed, past its time limit, or its node going down. */
export function settleStop(why: StopCause, facts: AttemptFacts): Ending {
  // A call that may be made again, one stopped before it was sent, and one whose task the next attempt can poll
  // may have a next attempt (on another node).
  const retryable = !facts.sent || facts.again || facts.task;
  // A task nobody will poll again is cancelled on its server (a time limit with attempts left leaves it running).
  const ends = why.bySession || why.outcome === 'cancelled' || why.outcome === 'killed' || facts.last || !retryable;
  const steps: Steps = {
    ...(facts.task && ends ? { cancelTask: true } : {}),
    // C3: a stopped call on a sandboxed server stops that server's whole process tree too (C7: before the next).
    ...(facts.sent && facts.sandbox ? { stopSandbox: true } : {}),
    ...(!facts.sent ? { unsent: true } : {}),
  };
  const line = { ...steps, outcome: why.outcome, note: why.text };
  const message = `${facts.tool}: ${why.text}`;
  if (why.bySession) return { ...line, failure: { type: FailureType.callCancelled, retryable: false, message } };
  if (why.outcome === 'cancelled') return { ...line, cancelled: true };
  const type = {
    lost: FailureType.nodeShutdown,
    killed: FailureType.killed,
    timeout: FailureType.timeLimit,
  }[why.outcome as 'lost' | 'killed' | 'timeout'];
  return {
    ...line,
    failure: {
      type: type ?? FailureType.attemptFailed,
      retryable: why.outcome === 'killed' ? false : retryable,
      message,
    },
  };
}

/**
 * The task the attempt before made is gone from its server (a restart, another session's, its ttl): a read starts
 * over with a task of its own; anything else is not made again, whatever its hints.
 */
export function settleTaskGone(gone: string, facts: Pick<AttemptFacts, 'tool' | 'key' | 'readOnly'>): Ending {
  if (facts.readOnly) {
    const failure = { type: FailureType.attemptFailed, retryable: true };
    return { forgetTask: true, outcome: 'lost', note: `${gone}: started over`, failure };
  }
  return {
    forgetTask: true,
    outcome: 'lost',
    note: `${gone}: not made again`,
    failure: {
      type: FailureType.mayHaveRun,
      retryable: false,
      message: `${facts.tool} (key ${facts.key}) may have run as a task its server no longer knows: not made again`,
    },
  };
}

/** The request failed without an answer: only a call that may be made again, or whose task is polled, tries again. */
export function settleUnknown(message: string, facts: Pick<AttemptFacts, 'tool' | 'again' | 'task'>): Ending {
  return {
    outcome: 'failed',
    note: `outcome unknown: ${message}`,
    failure: {
      type: FailureType.attemptFailed,
      // A task made is polled by the next attempt, never made again.
      retryable: facts.again || facts.task,
      message: `${facts.tool}: ${message}`,
    },
  };
}

/** An attempt's line in the trace: its outcome, its start notes (P5) and its ending's own, and the last progress. */
export function lineOf(attempt: number, ending: Ending, notes: readonly string[], progress?: Progress): AttemptRecord {
  const note = [...notes, ending.note].filter(Boolean).join('; ');
  return { attempt, outcome: ending.outcome, ...(note ? { note } : {}), ...(progress ? { progress } : {}) };
}

/** The job's view of an answer: content, structured content, isError, and its `_meta` without MCP's own keys. */
export function resultOf(result: CallToolResult): CallOutput['result'] {
  const meta = withoutReservedMeta(result._meta);
  return {
    isError: result.isError === true,
    content: result.content ?? [],
    ...(result.structuredContent ? { structuredContent: result.structuredContent as Record<string, unknown> } : {}),
    ...(meta ? { _meta: meta } : {}),
  };
}

/** What the job gets: the answer (as its step holds it: itself, or its claim in the store), and the attempts' trace. */
export function outputOf(result: CallOutput['result'], state: CallProgressState, node: string): CallOutput {
  return {
    result,
    attempts: state.attempts,
    node,
    ...(state.protocol ? { protocol: state.protocol } : {}),
    ...(state.sandboxQueues ? { sandboxQueues: state.sandboxQueues } : {}),
  };
}
