import type { CallToolResult, Tool } from '@modelcontextprotocol/client';
import { requestPlan } from '../../activities/call/plan';
import { questionOf, QUESTION_ARGS_CHARS } from '../../activities/call/policy-check';
import { progressed } from '../../activities/call/resume';
import {
  AttemptEnd,
  StoppedBeforeSend,
  lineOf,
  settleAnswer,
  settleStop,
  settleTaskGone,
  settleUnknown,
  settleUnkept,
} from '../../activities/call/settle';
import type { AnswerFacts, AttemptFacts, Ending } from '../../activities/call/settle';
import { cancelCause } from '../../activities/call/stops';
import type { StopCause } from '../../activities/call/stops';
import { FailureType } from '../../model/activities';
import { RESUME_META, RETRYABLE_META, RETRY_AFTER_META } from '../../model/protocol';

const facts: AttemptFacts & AnswerFacts = {
  tool: 'ledger.charge',
  key: 'job/c1',
  again: false,
  last: false,
  sent: true,
  task: false,
  readOnly: false,
  sandbox: false,
  bytes: 100,
  maxBytes: 64 * 1024 * 1024,
};
const answer: CallToolResult = { content: [{ type: 'text', text: 'done' }] };
const busy = (retryAfter?: number): CallToolResult => ({
  isError: true,
  content: [{ type: 'text', text: 'busy' }],
  _meta: { [RETRYABLE_META]: true, ...(retryAfter === undefined ? {} : { [RETRY_AFTER_META]: retryAfter }) },
});

/** An ending as a row: what the trace says and what Temporal is told, without the texts' wording. */
function shape(e: Ending) {
  const told = 'answer' in e ? 'answer' : 'cancelled' in e ? 'cancelled' : e.failure.type;
  const retryable = 'failure' in e ? e.failure.retryable : undefined;
  const steps = (['unsent', 'forgetTask', 'cancelTask', 'stopSandbox'] as const).filter((s) => e[s]);
  return { outcome: e.outcome, told, retryable, steps };
}

describe('settle: an answer', () => {
  test('an answer goes to the job, an error result too (it is a result, not a failure)', () => {
    expect(shape(settleAnswer(answer, facts))).toEqual({ outcome: 'ok', told: 'answer', steps: [] });
    const error = settleAnswer({ ...answer, isError: true }, facts);
    expect(shape(error)).toEqual({ outcome: 'error', told: 'answer', steps: [] });
  });

  test.each([
    [
      'may be made again',
      true,
      /answered 65\.0 MiB, past oz0's bound of 64\.0 MiB .*dropped/,
      /^the answer was 65\.0 MiB/,
    ],
    ['may not be made again', false, /did its work and answered 65\.0 MiB.*not made again/, /^the server did its work/],
  ])('D1: an answer past the bound is an error result naming its size and the bound (%s)', (_, again, text, note) => {
    const e = settleAnswer(answer, { ...facts, again, bytes: 65 * 1024 * 1024 });
    // The same call would answer the same again: an answer (an error result), never a retry.
    expect(shape(e)).toEqual({ outcome: 'failed', told: 'answer', steps: [] });
    expect('answer' in e && e.answer).toMatchObject({ isError: true, content: [{ type: 'text', text }] });
    expect(e.note).toMatch(note);
  });

  test('D1: an answer at the bound goes to the job', () => {
    expect(shape(settleAnswer(answer, { ...facts, bytes: facts.maxBytes }))).toMatchObject({ outcome: 'ok' });
  });

  test.each([
    ['may be made again: tried again', true, FailureType.attemptFailed, true],
    ['may not be made again: ends, never made again', false, FailureType.mayHaveRun, false],
  ])('D2: an answer the store could not keep fails the attempt (%s)', (_, again, type, retryable) => {
    const e = settleUnkept(new Error('the store is away'), { ...facts, again });
    expect(shape(e)).toMatchObject({ outcome: 'failed', told: type, retryable });
    expect(e.note).toMatch(/its answer could not be stored: the store is away/);
  });

  test.each<[string, Partial<AttemptFacts>, number | undefined, boolean, number | undefined]>([
    ['may be made again, attempts left, its wait', { again: true }, 3, true, 3000],
    ['may be made again, no wait given: the backoff', { again: true }, undefined, true, undefined],
    ['one attempt only', { again: false }, 3, false, undefined],
    ['the last attempt', { again: true, last: true }, 3, false, undefined],
    ['a wait over a minute', { again: true }, 61, false, undefined],
  ])('B2/B3: busy, %s', (_what, f, retryAfter, retried, delay) => {
    const e = settleAnswer(busy(retryAfter), { ...facts, ...f });
    expect(e.outcome).toBe('busy');
    if (retried) {
      expect('failure' in e && e.failure).toMatchObject({ type: FailureType.busy, retryable: true });
      expect('failure' in e && e.failure.nextRetryDelayMs).toBe(delay);
    } else {
      // The job reads the server's error, and the wait in words.
      expect('answer' in e && e.answer.content.at(-1)).toMatchObject({
        text: expect.stringMatching(/did not try again/),
      });
    }
  });
});

describe('settle: a stop', () => {
  const stop = (outcome: StopCause['outcome'], bySession?: true): StopCause => ({
    outcome,
    text: `oz0: ${outcome}`,
    ...(bySession ? { bySession } : {}),
  });
  test.each<[string, StopCause, Partial<AttemptFacts>, ReturnType<typeof shape>]>([
    [
      'C1: the job cancelled a sent call on a sandbox: the sandbox is stopped (C3)',
      stop('cancelled'),
      { sandbox: true },
      { outcome: 'cancelled', told: 'cancelled', retryable: undefined, steps: ['stopSandbox'] },
    ],
    [
      'C1: cancelled before anything was sent: unsent, no sandbox stopped',
      stop('cancelled'),
      { sent: false, sandbox: true },
      { outcome: 'cancelled', told: 'cancelled', retryable: undefined, steps: ['unsent'] },
    ],
    [
      'C5: a kill switch ends the call, its task cancelled',
      stop('killed'),
      { again: true, task: true },
      { outcome: 'killed', told: FailureType.killed, retryable: false, steps: ['cancelTask'] },
    ],
    [
      'C6: the time limit with attempts left leaves its task running for the next attempt',
      stop('timeout'),
      { task: true },
      { outcome: 'timeout', told: FailureType.timeLimit, retryable: true, steps: [] },
    ],
    [
      'C6: the time limit on the last attempt cancels its task',
      stop('timeout'),
      { task: true, last: true },
      { outcome: 'timeout', told: FailureType.timeLimit, retryable: true, steps: ['cancelTask'] },
    ],
    [
      'C6: the time limit on a call that may not be made again: no next attempt',
      stop('timeout'),
      {},
      { outcome: 'timeout', told: FailureType.timeLimit, retryable: false, steps: [] },
    ],
    [
      'the node shutting down, a call that may be made again: another node goes on',
      stop('lost'),
      { again: true },
      { outcome: 'lost', told: FailureType.nodeShutdown, retryable: true, steps: [] },
    ],
    [
      'H5: its session stopped it: the call ends, its task cancelled',
      stop('cancelled', true),
      { again: true, task: true },
      { outcome: 'cancelled', told: FailureType.callCancelled, retryable: false, steps: ['cancelTask'] },
    ],
  ])('%s', (_what, why, f, expected) => {
    expect(shape(settleStop(why, { ...facts, ...f }))).toEqual(expected);
  });

  test.each([
    [{ cancelRequested: true }, 'cancelled'],
    [{ workerShutdown: true }, 'lost'],
    [{ timedOut: true }, 'timeout'],
    [{ paused: true }, 'failed'],
    [undefined, 'cancelled'],
  ] as const)('C1: Temporal cancellation details %j read as %s', (details, outcome) => {
    expect(cancelCause(details as never).outcome).toBe(outcome);
  });
});

describe('settle: no answer', () => {
  test('T3: a task its server lost: a read starts over, anything else is not made again', () => {
    expect(shape(settleTaskGone('task t1 is gone', { ...facts, readOnly: true }))).toEqual({
      outcome: 'lost',
      told: FailureType.attemptFailed,
      retryable: true,
      steps: ['forgetTask'],
    });
    expect(shape(settleTaskGone('task t1 is gone', facts))).toEqual({
      outcome: 'lost',
      told: FailureType.mayHaveRun,
      retryable: false,
      steps: ['forgetTask'],
    });
  });

  test.each([
    [{ again: false, task: false }, false],
    [{ again: true, task: false }, true],
    [{ again: false, task: true }, true],
  ])('B4: outcome unknown, %j: tried again %p', (f, retryable) => {
    const e = settleUnknown('socket hang up', { ...facts, ...f });
    expect(shape(e)).toEqual({ outcome: 'failed', told: FailureType.attemptFailed, retryable, steps: [] });
    expect(e.note).toBe('outcome unknown: socket hang up');
  });

  test("P5: an attempt's line carries its start notes, its ending's note and its last progress", () => {
    const e = settleUnknown('gone', facts);
    expect(lineOf(2, e, ['resumed from progress 3'], { progress: 4 })).toEqual({
      attempt: 2,
      outcome: 'failed',
      note: 'resumed from progress 3; outcome unknown: gone',
      progress: { progress: 4 },
    });
    expect(lineOf(1, settleAnswer(answer, facts), [])).toEqual({ attempt: 1, outcome: 'ok' });
  });
});

describe('prepare: the request plan', () => {
  const write: Tool = { name: 'charge', inputSchema: { type: 'object' } };
  const read: Tool = { ...write, annotations: { readOnlyHint: true } };
  const plugin = { kind: 'plugin' as const, offersLegacyTasks: false, offersTaskExtension: false };
  const base = { call: facts, attempt: 1, tool: write, connection: plugin, approved: true, stopped: false };

  test('a first attempt goes out as a request', () => {
    expect(requestPlan({ ...base, prior: { attempts: [] } })).toEqual({
      asTask: false,
      again: false,
      readOnly: false,
      resume: undefined,
      takesTokens: false,
      notes: [],
    });
  });

  test('Words: a call that may not be made twice is not made again after an attempt that may have run', () => {
    const plan = () => requestPlan({ ...base, attempt: 2, prior: { attempts: [] } });
    expect(plan).toThrow(AttemptEnd);
    expect(() => plan()).toThrow(/may have run: not made again/);
    // Nothing of attempt 1 was sent: attempt 2 goes ahead.
    expect(requestPlan({ ...base, attempt: 2, prior: { attempts: [], unsent: [1] } }).notes).toEqual([]);
  });

  test('P4: a read may be made again and starts over on a plugin server; T1: a task before is polled', () => {
    expect(requestPlan({ ...base, tool: read, attempt: 2, prior: { attempts: [] } })).toMatchObject({
      again: true,
      readOnly: true,
      notes: ['started over: a plugin server’s shared session takes no resume token'],
    });
    const prior = { attempts: [], task: { id: 't1', status: 'working' as const, protocol: '2025-11-25' } };
    expect(requestPlan({ ...base, attempt: 2, prior })).toMatchObject({ asTask: true, notes: ['resumed task t1'] });
  });

  test('a stop while it prepared ends it before the request, a task it cannot make first', () => {
    const required: Tool = { ...write, execution: { taskSupport: 'required' } };
    expect(() => requestPlan({ ...base, stopped: true, prior: { attempts: [] } })).toThrow(StoppedBeforeSend);
    expect(() => requestPlan({ ...base, tool: required, stopped: true, prior: { attempts: [] } })).toThrow(
      /must run as an MCP task/,
    );
  });
});

describe('send: progress', () => {
  test('P1: progress must increase within one request; P3: a token counts from a function that takes them', () => {
    const token = { _meta: { [RESUME_META]: 'abc' } };
    expect(progressed({ progress: 2 }, { progress: 2 }, true)).toBeUndefined();
    expect(progressed(undefined, { progress: Number.NaN }, true)).toBeUndefined();
    expect(progressed({ progress: 2 }, { progress: 3, total: 10, ...token }, true)).toEqual({
      progress: { progress: 3, total: 10 },
      carried: { progress: 3, total: 10, token: 'abc', tokenProgress: { progress: 3, total: 10 } },
      invalidToken: false,
    });
    expect(progressed(undefined, { progress: 1, ...token }, false)?.carried).toEqual({ progress: 1, total: undefined });
  });
});

describe('A4: the question a person answers', () => {
  test('shows the arguments redacted and cut', () => {
    const asks = questionOf('ledger.*', { order: 'x'.repeat(QUESTION_ARGS_CHARS * 2), token: 'sk-secret' });
    expect(asks.pattern).toBe('ledger.*');
    expect(asks.args.length).toBe(QUESTION_ARGS_CHARS);
    expect(asks.args.endsWith('…')).toBe(true);
    expect(questionOf('p', { token: 'sk-secret' }).args).not.toContain('sk-secret');
  });
});
