/**
 * The workflow's part of one call's life (T1): its place in the job (its number and activity id), its activity on
 * the right queue, its question to a person when its verdict is `confirm` (A4-A6, ./questions), and its step in the
 * trace, whatever happened. Plain calls, scripted sessions and live sessions all make their calls through here.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  CancellationScope,
  TimeoutFailure,
  isCancellation,
  log,
  patched,
  proxyActivities,
} from '@temporalio/workflow';
import type { Priority } from '@temporalio/common';
import { TimeoutType } from '@temporalio/common';
import type { Activities } from '../model/activities';
import type { AttemptRecord, CallProgressState, CallStep } from '../model/schemas';
import { DEFAULT_CONFIRM_TIMEOUT_SECONDS, FailureType } from '../model/activities';
import type { CallInput, CallWaits, JobSettings, ToolSettings } from '../model/activities';
import type { QuestionTrace, StepTrace, ToolResult, WaitTrace } from '../model/job';
import { callSummary } from '../model/details';
import { grantedCallPriority } from '../model/shares';
import type { RunningCall } from '../model/details';
import type { Questions } from './questions';
import { addWait, withdraw } from './turns';
import type { Turns } from './turns';

/** Time an attempt gets beyond its own limit to stop cleanly (cancel sent, sandbox stopped) before Temporal's backstop. */
const BACKSTOP_SLACK_SECONDS = 10;
/** A tool the job's settings do not name (a live session's, before its node described it): one attempt, 60 s. */
const UNKNOWN_TOOL_SETTINGS: ToolSettings = {
  timeoutSeconds: 60,
  maxAttempts: 1,
  confirmTimeoutSeconds: DEFAULT_CONFIRM_TIMEOUT_SECONDS,
};

/** What every call of a job shares: who and where, and the counters that place each call. */
export interface JobContext {
  jobId: string;
  tenant: string;
  /** m in K2: how many times the job continued as new. */
  run: number;
  settings: JobSettings;
  /** The node queues where this job left sandboxed servers: they are stopped when the job ends. */
  sandboxQueues: Set<string>;
  counters: { calls: number; callsThisRun: number; sessions: number };
  /** The calls running now, by activity id, for the job's current details (T3). */
  running: Map<string, RunningCall>;
  /** Shows the job's current details again, after a change. */
  show(): void;
  /** A4: its calls that wait for a person's yes. */
  questions: Questions;
  /** F2, F3: its calls that wait for their turn. */
  turns: Turns;
  /**
   * F1, F4: what every activity it schedules carries: its tenant as Temporal's fairness key (said on each, so a job
   * started without it still dispatches fairly), and its spec's priority.
   */
  priority: Priority;
}

/**
 * A session's node taken for lost (T4): the job's end no longer asks its queue to stop the sandboxed servers there.
 * A dead node picks nothing up, and the stop would only wait out its schedule-to-start time; a node that was cut off
 * and comes back stops them itself once the job has ended (I9, activities/ended-jobs.ts). A later session placed on
 * that node adds its queue again.
 */
export function forgetLostNode(ctx: JobContext, queue: string): void {
  // T5: a history recorded before this asked every queue, the lost one too; its replay must issue the same commands.
  if (patched(FORGET_LOST_NODES)) ctx.sandboxQueues.delete(queue);
}

/** The patch (Temporal's versioning) under which a job stops asking a lost node to stop its sandboxes. */
const FORGET_LOST_NODES = 'forget-lost-nodes';

/** A call's place in the job: its number in the whole job and its activity id in this run (`c1`, `c2`, …). */
export interface Placed {
  n: number;
  activityId: string;
}

/** Takes the next place; synchronous, so calls placed in one workflow task keep the order they were accepted in. */
export function placeCall(ctx: JobContext): Placed {
  ctx.counters.calls++;
  ctx.counters.callsThisRun++;
  return { n: ctx.counters.calls, activityId: `c${ctx.counters.callsThisRun}` };
}

/** Where and how a call runs: outside a session (any node), or in one (its node's own queue, T4). */
export interface CallPlace {
  session: string | null;
  sessionRun?: number;
  taskQueue?: string;
  /** Set once the session's node is known lost: the call's cancel then means "lost", not "job cancelled". */
  lost?: () => string | undefined;
  /** Set when a live session's caller stopped this call (H5), with its words. */
  cancelledBy?: () => string | undefined;
  relay?: CallInput['relay'];
  /** The tool's settings, when the job's settings do not have them (a live session's tools). */
  settings?: ToolSettings;
  /** F4: the call's own priority, when not its job's (a live session's calls go one step ahead). */
  priorityKey?: number;
  /** Puts the call's step in the trace: once, when it ended, before a job cancel is thrown on. */
  record(step: StepTrace): void;
}

/** How a call ended, as its step records it; `lost` when its session's node was lost under it. */
export interface CallEnd {
  step: StepTrace;
  lost?: string;
  /** The answer's `_meta`, for a live session's caller. */
  meta?: Record<string, unknown>;
  /** Nothing of it reached its server (it ended while it waited for a person): a lost session may make it again. */
  unsent?: true;
}

/**
 * Runs one call's activity, records its step and returns how it ended. A job cancel is recorded, then thrown on; any
 * other failure is the step's error result, as a model would read it, and the job goes on.
 *
 * One async function per call, its ends recorded where they happen: every promise a workflow makes costs a stack
 * capture in the SDK (sdk-typescript#1587), and the workflow thread's time per call grows with them (issue 26.5).
 */
export async function makeCall(
  ctx: JobContext,
  placed: Placed,
  call: CallStep,
  key: string,
  place: CallPlace,
): Promise<CallEnd> {
  const tool = call.call;
  const settings = ctx.settings.tools[tool] ?? place.settings ?? UNKNOWN_TOOL_SETTINGS;
  const priority = { ...ctx.priority, ...(place.priorityKey ? { priorityKey: place.priorityKey } : {}) };
  /**
   * The call's activity; scheduled anew after a wait for its turn, with the attempts it has left (F2, F3), and one step
   * ahead once its turn came (a permit waits for it).
   */
  const callTool = (attemptsBefore: number, granted: boolean) =>
    proxyActivities<Activities>({
      activityId: placed.activityId,
      // A session's calls run on its node's own queue (T4); any other call on the shared one.
      ...(place.taskQueue ? { taskQueue: place.taskQueue } : {}),
      summary: callSummary(tool, key, ctx.jobId),
      priority: granted ? { ...priority, priorityKey: grantedCallPriority(priority.priorityKey) } : priority,
      // Temporal's timeout is only a backstop: the attempt stops itself at its own limit (C6).
      startToCloseTimeout: `${settings.timeoutSeconds + BACKSTOP_SLACK_SECONDS}s`,
      heartbeatTimeout: `${ctx.settings.heartbeatTimeoutSeconds}s`,
      retry: {
        maximumAttempts: settings.maxAttempts - attemptsBefore,
        initialInterval: '1s',
        backoffCoefficient: 2,
        // At least 60 s so that a server's own wait (B2, up to a minute) is never cut short.
        maximumInterval: '60s',
        nonRetryableErrorTypes: [FailureType.badSpec, FailureType.unknownTool, FailureType.mayHaveRun],
      },
      // Said explicitly: the job must not show CANCELED before the call has really stopped (C4).
      cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    }).callTool;
  const base = {
    n: placed.n,
    tool,
    key,
    session: place.session,
    activityId: placed.activityId,
    ...(place.sessionRun ? { sessionRun: place.sessionRun } : {}),
  };
  const running: RunningCall = {
    activityId: placed.activityId,
    tool,
    key,
    session: place.session,
    ...(place.sessionRun ? { sessionRun: place.sessionRun } : {}),
  };
  ctx.running.set(placed.activityId, running);
  ctx.show();
  /** The call's end: off the running list and into the trace (which shows the details once for both). */
  const ended = (end: CallEnd): CallEnd => {
    ctx.running.delete(placed.activityId);
    place.record(end.step);
    return end;
  };
  const confirmTimeoutSeconds = settings.confirmTimeoutSeconds ?? DEFAULT_CONFIRM_TIMEOUT_SECONDS;
  const input: CallInput = {
    jobId: ctx.jobId,
    tenant: ctx.tenant,
    tool,
    args: call.args ?? {},
    key,
    session: place.session,
    timeoutSeconds: settings.timeoutSeconds,
    maxAttempts: settings.maxAttempts,
    confirmTimeoutSeconds,
    ...(priority.priorityKey ? { priority: priority.priorityKey } : {}),
    ...(place.relay ? { relay: place.relay } : {}),
  };
  let question: QuestionTrace | undefined;
  let waiting = false;
  /** F2, F3: what the call waited for, if it did; and what it waits for now, since when. */
  const waited: WaitTrace[] = [];
  let waitsNow: { waits: CallWaits['waits']; since: number } | undefined;
  try {
    for (;;) {
      const out = await callTool(input.before?.attempts ?? 0, input.granted === true)(input);
      if ('waits' in out) {
        // F2, F3: nothing was sent and no attempt used; the call waits here, holding no slot, then goes again.
        for (const queue of out.state.sandboxQueues ?? []) ctx.sandboxQueues.add(queue);
        input.before = out.attempts > 0 ? { attempts: out.attempts, state: out.state } : undefined;
        waitsNow = { waits: out.waits, since: Date.now() };
        const turn = await ctx.turns.wait(key, out.waits);
        addWait(waited, out.waits.for, out.waits.why, Date.now() - waitsNow.since);
        waitsNow = undefined;
        if (turn?.granted) input.granted = true;
        else delete input.granted;
        continue;
      }
      for (const queue of out.sandboxQueues ?? []) ctx.sandboxQueues.add(queue);
      if ('asks' in out) {
        // A4: nothing was sent; the call waits for a person's yes before its first attempt.
        question ??= { askedAt: new Date().toISOString(), pattern: out.asks.pattern };
        ctx.running.delete(placed.activityId);
        waiting = true;
        const settled = await ctx.questions.ask(
          { ...base, tenant: ctx.tenant, timeoutSeconds: confirmTimeoutSeconds, asks: out.asks },
          question,
        );
        waiting = false;
        ctx.running.set(placed.activityId, running);
        if ('refused' in settled) {
          const attempts = [{ attempt: 1, outcome: 'refused' as const, note: settled.refused.note }];
          return ended({
            step: { ...base, question, result: errorResult(settled.refused.text), attempts },
            unsent: true,
          });
        }
        // A5: a yes goes with this call's attempts, under its one key; after a change of policy, it looks again.
        if ('approved' in settled) {
          const { by, at, identity } = settled.approved;
          input.confirmed = { key, by, at, ...(identity ? { identity } : {}) };
        }
        continue;
      }
      const { _meta: meta, ...result } = out.result;
      const protocol = out.protocol ? { protocol: out.protocol } : {};
      const withQuestion = question ? { question } : {};
      const step = { ...base, ...withQuestion, result, attempts: out.attempts, node: out.node, ...protocol };
      return ended(withWaits({ step, meta }, waited));
    }
  } catch (err) {
    // F2, F3: a call stopped while it waited says how long it did; one in line leaves it, whatever stopped it.
    const inLine = waitsNow?.waits.for === 'turn';
    if (waitsNow) addWait(waited, waitsNow.waits.for, waitsNow.waits.why, Date.now() - waitsNow.since);
    if (inLine) await CancellationScope.nonCancellable(() => withdraw(ctx.tenant, { jobId: ctx.jobId, key }));
    const prior = input.before?.state.attempts ?? [];
    try {
      const at = { base, question, waiting, prior, inLine };
      return ended(withWaits(failedEnd(ctx, err, at, place, { tool, key }), waited));
    } catch (stop) {
      if (!(stop instanceof CallStopped)) throw stop;
      ended({ step: withWaits({ step: stop.step }, waited).step });
      throw stop.cancel;
    }
  } finally {
    ctx.turns.forget(key);
    // Shown already where it ended; a failure of the workflow's own is shown here.
    if (ctx.running.delete(placed.activityId)) ctx.show();
  }
}

/** F2, F3: the step keeps what its call waited for. */
function withWaits(end: CallEnd, waited: WaitTrace[]): CallEnd {
  return waited.length ? { ...end, step: { ...end.step, waited } } : end;
}

/** How a call whose activity failed (or that was stopped while it waited for a person) ended; a job cancel throws. */
function failedEnd(
  ctx: JobContext,
  err: unknown,
  at: {
    base: Omit<StepTrace, 'result' | 'attempts'>;
    question?: QuestionTrace;
    waiting: boolean;
    /** F2, F3: the attempts made before the call's wait for its turn, and whether it waited then. */
    prior: AttemptRecord[];
    inLine: boolean;
  },
  place: CallPlace,
  call: { tool: string; key: string },
): CallEnd {
  const { base, question } = at;
  const { tool, key } = call;
  if (at.waiting) return whileWaiting(err, base, question!, place);
  const failed = describeFailure(err, at);
  for (const queue of failed.sandboxQueues) ctx.sandboxQueues.add(queue);
  const protocol = failed.protocol ? { protocol: failed.protocol } : {};
  const withQuestion = question ? { question } : {};
  const lost = place.lost?.() ?? (place.taskQueue && nodeTimedOut(err) ? 'its node stopped answering' : undefined);
  if (lost) {
    const attempts = failed.attempts.filter((a) => a.outcome !== 'cancelled' && a.outcome !== 'lost');
    attempts.push({ attempt: attempts.length + 1, outcome: 'lost', note: `oz0: ${lost}` });
    const text = `oz0: the call was lost with its node (${lost})`;
    return { step: { ...base, ...withQuestion, result: errorResult(text), attempts, ...protocol }, lost };
  }
  const byCaller = place.cancelledBy?.();
  if (byCaller !== undefined && (isCancellation(err) || failed.type === FailureType.callCancelled)) {
    const attempts = failed.attempts.filter((a) => a.outcome !== 'cancelled');
    attempts.push({
      attempt: attempts.length + 1,
      outcome: 'cancelled',
      note: `oz0: cancelled by its session: ${byCaller}`,
    });
    const result = errorResult(`oz0: the call was cancelled by its session: ${byCaller}`);
    return { step: { ...base, ...withQuestion, result, attempts, ...protocol } };
  }
  const step = { ...base, ...withQuestion, result: failed.result, attempts: failed.attempts, ...protocol };
  if (isCancellation(err)) throw new CallStopped(err, step);
  // An error result on the step, as a model reads it: the job goes on; not a warning of the workflow's.
  log.info('call failed', { tool, key, message: failed.message });
  return { step };
}

/**
 * A4/A6/A7: a call stopped while it waited for a person: its question is withdrawn and nothing was sent. Its session's
 * cancel ends it; its session's lost node leaves it to the next run; a job cancel is thrown on.
 */
function whileWaiting(
  err: unknown,
  base: Omit<StepTrace, 'result' | 'attempts'>,
  question: QuestionTrace,
  place: CallPlace,
): CallEnd {
  const nothing = "it waited for a person's yes; nothing was sent";
  const lost = place.lost?.();
  const byCaller = place.cancelledBy?.();
  const end = (outcome: 'lost' | 'cancelled', why: string, text: string): CallEnd => {
    question.ended ??= why;
    const attempts = [{ attempt: 1, outcome, note: `oz0: ${why}; ${nothing}` }];
    return { step: { ...base, question, result: errorResult(`oz0: ${text}; ${nothing}`), attempts }, unsent: true };
  };
  if (lost) return { ...end('lost', lost, `the call's session was lost (${lost})`), lost };
  if (byCaller !== undefined) {
    return end(
      'cancelled',
      `withdrawn by its session: ${byCaller}`,
      `the call was cancelled by its session: ${byCaller}`,
    );
  }
  if (!isCancellation(err)) throw err;
  throw new CallStopped(
    err,
    end('cancelled', 'the job was cancelled', 'the call was stopped: the job was cancelled').step,
  );
}

/** A job cancel that stopped a call, with the step it left; makeCall records the step and throws the cancel on. */
class CallStopped {
  constructor(
    readonly cancel: unknown,
    readonly step: StepTrace,
  ) {}
}

export function errorResult(text: string): ToolResult {
  return { isError: true, content: [{ type: 'text', text }] };
}

/** A session call whose node stopped heartbeating, or never picked the call up. */
function nodeTimedOut(err: unknown): boolean {
  if (!(err instanceof ActivityFailure) || !(err.cause instanceof TimeoutFailure)) return false;
  return err.cause.timeoutType === TimeoutType.HEARTBEAT || err.cause.timeoutType === TimeoutType.SCHEDULE_TO_START;
}

/** A failed or stopped call as its step records it: an error result a model can read, and its attempts. */
function describeFailure(
  err: unknown,
  before: { prior: AttemptRecord[]; inLine: boolean } = { prior: [], inLine: false },
): {
  result: ToolResult;
  attempts: AttemptRecord[];
  message: string;
  type?: string;
  sandboxQueues: string[];
  protocol?: string;
} {
  let message = err instanceof Error ? err.message : String(err);
  let state: CallProgressState | undefined;
  let type: string | undefined;
  if (err instanceof ActivityFailure && err.cause) {
    const cause = err.cause;
    message = cause.message;
    if (cause instanceof TimeoutFailure) {
      state = cause.lastHeartbeatDetails as CallProgressState | undefined;
      message = `Temporal timed out the call (${String(cause.timeoutType)}): its node may have been lost`;
    } else {
      state = (cause as { details?: unknown[] }).details?.[0] as CallProgressState | undefined;
      type = (cause as { type?: string }).type;
    }
  }
  // A stop while the call waited for its turn (F2, F3) finds the attempts made before the wait.
  const attempts = Array.isArray(state?.attempts) ? [...state.attempts] : [...before.prior];
  const cancelled = before.inLine
    ? 'oz0: job cancelled while the call waited for its turn; nothing was sent'
    : 'oz0: job cancelled';
  // A cancellation's own message is often empty: the last attempt's note says why.
  if (!message) message = attempts.at(-1)?.note ?? (isCancellation(err) ? cancelled : 'unknown failure');
  if (isCancellation(err) && !attempts.some((a) => a.outcome === 'cancelled')) {
    attempts.push({ attempt: attempts.length + 1, outcome: 'cancelled', note: cancelled });
  }
  if (err instanceof ActivityFailure && err.cause instanceof TimeoutFailure) {
    attempts.push({ attempt: attempts.length + 1, outcome: 'lost', note: message });
  }
  const text = isCancellation(err) ? `oz0: the call was stopped: ${message}` : `oz0: the call failed: ${message}`;
  const sandboxQueues = Array.isArray(state?.sandboxQueues) ? state.sandboxQueues : [];
  const protocol = typeof state?.protocol === 'string' ? { protocol: state.protocol } : {};
  return { result: errorResult(text), attempts, message, type, sandboxQueues, ...protocol };
}
