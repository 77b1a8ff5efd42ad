/**
 * The job workflow (T1): its steps in order, each call one activity, keys decided here (K1-K6), continue-
 * as-new between steps (T2), status and trace for the client and the UI (T3).
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  TimeoutFailure,
  continueAsNew,
  isCancellation,
  log,
  proxyActivities,
  proxyLocalActivities,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import { FailureType, Oz0Status, Oz0Tenant, Oz0Tools, statusQuery, toolsOf, traceQuery } from './definitions';
import type { JobCarry, JobStatus, JobTrace, StepTrace, ToolResult } from './definitions';
import { TimeoutType } from '@temporalio/common';
import { defaultKey } from './keys';
import { NodeLost, runSession } from './session';
import type { SessionCall } from './session';
import type { AttemptRecord, CallProgressState, CallStep, JobSpec } from '../common/schemas';

/** Steps kept in the trace within one run; older ones are counted in `omitted`. */
const MAX_TRACE_STEPS = 1000;
/** Steps carried into the next run (T2: a bounded trace tail). */
const TRACE_TAIL = 100;
/** Time an attempt gets beyond its own limit to stop cleanly (cancel sent, sandbox stopped) before Temporal's backstop. */
const BACKSTOP_SLACK_SECONDS = 10;

const { resolveJobSettings } = proxyLocalActivities<Activities>({ startToCloseTimeout: '10s' });

export async function job(input: unknown, carry?: JobCarry): Promise<JobTrace> {
  // The spec is checked (zod, outside the workflow bundle) by the node before anything else; a spec started from
  // the client was checked before it started, one started from elsewhere is refused here, naming the field.
  const resolved = await resolveJobSettings(input);
  if ('badSpec' in resolved) throw ApplicationFailure.nonRetryable(resolved.badSpec, FailureType.badSpec);
  const settings = resolved;
  const spec = input as JobSpec;
  const jobId = workflowInfo().workflowId;
  const run = carry?.run ?? 0;
  let status: JobStatus = 'running';
  let calls = carry?.calls ?? 0;
  let omitted = carry?.omitted ?? 0;
  let sessions = carry?.sessions ?? 0;
  let callsThisRun = 0;
  const steps: StepTrace[] = carry?.traceTail ?? [];
  const sandboxQueues = new Set(carry?.sandboxQueues ?? []);

  const trace = (): JobTrace => ({ jobId, status, run, calls, omitted, steps });
  const setStatus = (next: JobStatus) => {
    status = next;
    upsertSearchAttributes([{ key: Oz0Status, value: next }]);
  };
  setHandler(statusQuery, () => status);
  setHandler(traceQuery, trace);
  upsertSearchAttributes([
    { key: Oz0Status, value: 'running' },
    { key: Oz0Tenant, value: spec.tenant },
    { key: Oz0Tools, value: toolsOf(spec) },
  ]);
  // C4: `cancelling` from the cancel request until every running call has stopped.
  CancellationScope.current().cancelRequested.catch(() => {
    if (status === 'running') setStatus('cancelling');
  });

  const record = (step: StepTrace) => {
    steps.push(step);
    if (steps.length > MAX_TRACE_STEPS) {
      steps.shift();
      omitted++;
    }
  };

  const runCall = async (step: CallStep, opts: CallPlace) => {
    const { session, key } = opts;
    calls++;
    callsThisRun++;
    const activityId = `c${callsThisRun}`;
    const tool = step.call;
    const callKey = key(activityId);
    const args = step.args ?? {};
    const toolSettings = settings.tools[tool] ?? { timeoutSeconds: 60, maxAttempts: 1 };
    const { callTool } = proxyActivities<Activities>({
      activityId,
      // A session's calls run on its node's own queue (T4); any other call on the shared one.
      ...(opts.taskQueue ? { taskQueue: opts.taskQueue } : {}),
      summary: `${tool} · ${callKey}`,
      // Temporal's timeout is only a backstop: the attempt stops itself at its own limit (C6).
      startToCloseTimeout: `${toolSettings.timeoutSeconds + BACKSTOP_SLACK_SECONDS}s`,
      heartbeatTimeout: `${settings.heartbeatTimeoutSeconds}s`,
      retry: {
        maximumAttempts: toolSettings.maxAttempts,
        initialInterval: '1s',
        backoffCoefficient: 2,
        // At least 60 s so that a server's own wait (B2, up to a minute) is never cut short.
        maximumInterval: '60s',
        nonRetryableErrorTypes: [FailureType.badSpec, FailureType.unknownTool, FailureType.mayHaveRun],
      },
      // Said explicitly: the job must not show CANCELED before the call has really stopped (C4).
      cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    });
    const base = {
      n: calls,
      tool,
      key: callKey,
      session,
      activityId,
      ...(opts.sessionRun ? { sessionRun: opts.sessionRun } : {}),
    };
    try {
      const out = await callTool({
        jobId,
        tenant: spec.tenant,
        tool,
        args,
        key: callKey,
        session,
        timeoutSeconds: toolSettings.timeoutSeconds,
        maxAttempts: toolSettings.maxAttempts,
      });
      if (out.sandboxQueue) sandboxQueues.add(out.sandboxQueue);
      const { _meta: _ignored, ...result } = out.result;
      record({ ...base, result, attempts: out.attempts, node: out.node });
    } catch (err) {
      const failed = describeFailure(err);
      const lost = opts.lost?.() ?? (opts.taskQueue && nodeTimedOut(err) ? 'its node stopped answering' : undefined);
      if (lost) {
        // T4: the session's node is gone; the session decides what follows.
        const attempts = failed.attempts.filter((a) => a.outcome !== 'cancelled' && a.outcome !== 'lost');
        attempts.push({ attempt: attempts.length + 1, outcome: 'lost', note: `oz0: ${lost}` });
        const text = `oz0: the call was lost with its node (${lost})`;
        record({ ...base, result: { isError: true, content: [{ type: 'text', text }] }, attempts });
        throw new NodeLost(lost);
      }
      record({ ...base, result: failed.result, attempts: failed.attempts });
      if (isCancellation(err)) throw err;
      log.warn('call failed', { tool, key: callKey, message: failed.message });
    }
  };

  let continuing = false;
  try {
    for (let i = 0; i < spec.steps.length; i++) {
      const due = callsThisRun >= settings.continueAsNewAfterCalls || workflowInfo().continueAsNewSuggested;
      if (i > 0 && callsThisRun > 0 && due) {
        // K6: only between steps, so a session never spans two runs.
        continuing = true;
        const next: JobCarry = {
          run: run + 1,
          calls,
          sessions,
          omitted: omitted + Math.max(0, steps.length - TRACE_TAIL),
          traceTail: steps.slice(-TRACE_TAIL),
          sandboxQueues: [...sandboxQueues],
        };
        await continueAsNew<typeof job>({ tenant: spec.tenant, steps: spec.steps.slice(i) }, next);
      }
      const step = spec.steps[i];
      if ('call' in step) {
        await runCall(step, { session: null, key: (activityId) => defaultKey(jobId, run, activityId) });
        continue;
      }
      sessions++;
      await runSession(
        {
          jobId,
          tenant: spec.tenant,
          run,
          heartbeatTimeoutSeconds: settings.heartbeatTimeoutSeconds,
          sandboxQueues,
          runCall,
        },
        step,
        sessions,
      );
    }
    setStatus('completed');
    return trace();
  } catch (err) {
    if (isCancellation(err)) setStatus('cancelled');
    throw err;
  } finally {
    if (!continuing) await stopSandboxes(jobId, sandboxQueues);
  }
}

/** Stops the job's sandboxed servers on every node that started one; a lost node has nothing to stop. */
async function stopSandboxes(jobId: string, queues: Set<string>): Promise<void> {
  await CancellationScope.nonCancellable(async () => {
    await Promise.all(
      [...queues].map(async (taskQueue) => {
        const { stopSandboxes: stop } = proxyActivities<Activities>({
          taskQueue,
          scheduleToStartTimeout: '10s',
          startToCloseTimeout: '30s',
          retry: { maximumAttempts: 1 },
        });
        try {
          await stop(jobId);
        } catch (err) {
          log.warn('could not stop sandboxed servers', { taskQueue, error: String(err) });
        }
      }),
    );
  });
}

/** Where and under which key a call runs: outside a session (shared queue), or in one (its node's queue). */
type CallPlace =
  | ({ session: null; key: (activityId: string) => string } & Partial<Omit<SessionCall, 'session' | 'key'>>)
  | SessionCall;

/** A session call whose node stopped heartbeating, or never picked the call up. */
function nodeTimedOut(err: unknown): boolean {
  if (!(err instanceof ActivityFailure) || !(err.cause instanceof TimeoutFailure)) return false;
  return err.cause.timeoutType === TimeoutType.HEARTBEAT || err.cause.timeoutType === TimeoutType.SCHEDULE_TO_START;
}

/** A failed or stopped call as its step records it: an error result a model can read, and its attempts. */
function describeFailure(err: unknown): { result: ToolResult; attempts: AttemptRecord[]; message: string } {
  let message = err instanceof Error ? err.message : String(err);
  let state: CallProgressState | undefined;
  if (err instanceof ActivityFailure && err.cause) {
    const cause = err.cause;
    message = cause.message;
    if (cause instanceof TimeoutFailure) {
      state = cause.lastHeartbeatDetails as CallProgressState | undefined;
      message = `Temporal timed out the call (${String(cause.timeoutType)}): its node may have been lost`;
    } else {
      state = (cause as { details?: unknown[] }).details?.[0] as CallProgressState | undefined;
    }
  }
  const attempts = Array.isArray(state?.attempts) ? [...state.attempts] : [];
  // A cancellation's own message is often empty: the last attempt's note says why.
  if (!message) message = attempts.at(-1)?.note ?? (isCancellation(err) ? 'oz0: job cancelled' : 'unknown failure');
  if (isCancellation(err) && !attempts.some((a) => a.outcome === 'cancelled')) {
    attempts.push({ attempt: attempts.length + 1, outcome: 'cancelled', note: 'oz0: job cancelled' });
  }
  if (err instanceof ActivityFailure && err.cause instanceof TimeoutFailure) {
    attempts.push({ attempt: attempts.length + 1, outcome: 'lost', note: message });
  }
  const text = isCancellation(err) ? `oz0: the call was stopped: ${message}` : `oz0: the call failed: ${message}`;
  return { result: { isError: true, content: [{ type: 'text', text }] }, attempts, message };
}
