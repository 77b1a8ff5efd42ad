/**
 * The job workflow (T1): its steps in order — calls, scripted sessions, live sessions — each call one activity, keys
 * decided here (K1-K6), continue-as-new between steps (T2), status and trace for the client and the UI (T3).
 */
import {
  ApplicationFailure,
  CancellationScope,
  ContinueAsNew,
  allHandlersFinished,
  condition,
  isCancellation,
  log,
  makeContinueAsNewFunc,
  proxyActivities,
  proxyLocalActivities,
  setCurrentDetails,
  setHandler,
  upsertSearchAttributes,
  workflowInfo,
} from '@temporalio/workflow';
import type { Activities, JobSettings } from '../model/activities';
import type { JobSpec } from '../model/schemas';
import { makeCall, placeCall } from './calls';
import type { JobContext } from './calls';
import { FailureType } from '../model/activities';
import { Oz0Status, Oz0Tenant, Oz0Tools, knownOf, scriptedCalls, toolsOf } from '../model/job';
import { statusQuery, traceQuery } from '../model/messages';
import type { JobCarry, JobStatus, JobTrace, TraceStep } from '../model/job';
import { currentDetails, jobSummary } from '../model/details';
import type { RunningCall } from '../model/details';
import { defaultKey } from '../model/keys';
import { LiveSessions } from './live-session';
import { Questions } from './questions';
import { runScriptedSession } from './session';
import { Turns } from './turns';
import { changed } from './marks';
import { jobPriority } from '../model/shares';

/** Steps kept in the trace within one run; older ones are counted in `omitted`. */
const MAX_TRACE_STEPS = 1000;
/** Steps of the run before that a run keeps in its own trace (T2: a bounded trace tail). */
const TRACE_TAIL = 100;

const { resolveJobSettings } = proxyLocalActivities<Activities>({ startToCloseTimeout: '10s' });

export async function job(input: unknown, carry?: JobCarry): Promise<JobTrace> {
  const jobId = workflowInfo().workflowId;
  const run = carry?.run ?? 0;
  let status: JobStatus = 'running';
  // D3: a run hands its next its steps whole (answers as claims: ../model/job.ts), so that the next run's start in
  // history holds them for `oz0 job trace`; a run keeps only their tail. A run of an older node handed on the tail.
  const handed = carry?.traceTail ?? [];
  const steps: TraceStep[] = handed.slice(-TRACE_TAIL);
  let omitted = (carry?.omitted ?? 0) + handed.length - steps.length;
  const counters = { calls: carry?.calls ?? 0, callsThisRun: 0, sessions: carry?.sessions ?? 0 };
  const trace = (): JobTrace => ({ jobId, status, run, calls: counters.calls, omitted, steps });
  // Every handler before the first await: a query or an Update made in the same breath as the start finds it.
  setHandler(statusQuery, () => status, {
    description:
      'running, waiting (a call waits for a person) or cancelling while the run is open; then COMPLETED, CANCELED, FAILED or CONTINUED_AS_NEW',
  });
  setHandler(traceQuery, trace, { description: "the job's steps and every attempt (SPEC Trace JSON)" });
  const live = new LiveSessions();
  live.register();
  // A4: `waiting` while a call waits for a person's yes (never over `cancelling`), in the status and Oz0Status.
  // N6: the run's settings, once resolved, say which of this release's changes it takes (workflows/marks.ts).
  const resolvedFor: { settings?: JobSettings } = {};
  const questions = new Questions(
    () => {
      if (status === 'running' && questions.size > 0) setStatus('waiting');
      else if (status === 'waiting' && questions.size === 0) setStatus('running');
      else show();
    },
    (change) => changed(resolvedFor.settings, change),
  );
  questions.register();
  const turns = new Turns();
  turns.register();
  setCurrentDetails(`**${status}** · checking the job's spec`);

  // The spec is checked (zod, outside the workflow bundle) by the node before anything else; a spec started from
  // the client was checked before it started, one started from elsewhere is refused here, naming the field. F1: the
  // node also puts the job's fairness key on it when it was started without (its later tasks are then fair too).
  const resolved = await resolveJobSettings(input, workflowInfo().priority ?? {});
  if ('badSpec' in resolved) {
    // What can be known goes on the failed run, so a tenant's filter finds its own failed jobs too.
    const known = knownOf(input);
    status = 'FAILED';
    upsertSearchAttributes([
      { key: Oz0Status, value: status },
      ...(known.tenant ? [{ key: Oz0Tenant, value: known.tenant }] : []),
      ...(known.tools.length ? [{ key: Oz0Tools, value: known.tools }] : []),
    ]);
    setCurrentDetails(`**${status}** · bad spec: ${resolved.badSpec}`);
    throw ApplicationFailure.nonRetryable(resolved.badSpec, FailureType.badSpec);
  }
  resolvedFor.settings = resolved;
  const spec = input as JobSpec;
  let at = 0;
  const summary = jobSummary(spec);
  const running = new Map<string, RunningCall>();
  // The Temporal UI asks for these when it shows the job: no history event, so it follows every change.
  const show = () =>
    setCurrentDetails(
      currentDetails({
        jobId,
        status,
        run,
        calls: counters.calls,
        step: at,
        steps: spec.steps.length,
        summary,
        running: running.values(),
        waiting: questions.list(),
        // Only live sessions are read from the trace: a job that never had one skips its steps.
        trace: counters.sessions > 0 ? steps : [],
      }),
    );
  const ctx: JobContext = {
    jobId,
    tenant: spec.tenant,
    run,
    settings: resolved,
    sandboxQueues: new Set(carry?.sandboxQueues ?? []),
    counters,
    running,
    show,
    questions,
    turns,
    priority: jobPriority(spec),
  };
  live.attach(ctx, spec.steps);

  const setStatus = (next: JobStatus) => {
    status = next;
    upsertSearchAttributes([{ key: Oz0Status, value: next }]);
    show();
  };
  upsertSearchAttributes([
    { key: Oz0Status, value: 'running' },
    { key: Oz0Tenant, value: spec.tenant },
    { key: Oz0Tools, value: toolsOf(spec) },
  ]);
  // C4: `cancelling` from the cancel request until every running call has stopped.
  CancellationScope.current().cancelRequested.catch(() => {
    if (status === 'running' || status === 'waiting') setStatus('cancelling');
  });

  const record = (step: TraceStep) => {
    steps.push(step);
    if (steps.length > MAX_TRACE_STEPS) {
      steps.shift();
      omitted++;
    }
    show();
  };

  let continuing = false;
  try {
    for (let i = 0; i < spec.steps.length; i++) {
      const step = spec.steps[i];
      at = i;
      // A call shows the details itself as it starts (./calls.ts): once per call, not twice (issue 26.5).
      if (!('call' in step)) show();
      const isLive = 'session' in step && !scriptedCalls(step);
      const due =
        counters.callsThisRun >= resolved.continueAsNewAfterCalls ||
        workflowInfo().continueAsNewSuggested ||
        // Temporal caps the Updates of one run: a live session starts a run of its own after another's.
        (isLive && live.callsThisRun > 0);
      if (i > 0 && counters.callsThisRun > 0 && due) {
        // K6: only between steps, so a session never spans two runs; every Update answered first.
        continuing = true;
        await condition(allHandlersFinished);
        const next: JobCarry = {
          run: run + 1,
          calls: counters.calls,
          sessions: counters.sessions,
          omitted,
          traceTail: steps,
          sandboxQueues: [...ctx.sandboxQueues],
        };
        // This run closes as CONTINUED_AS_NEW: only the job's current run says running (T3). The next run starts with
        // its search attributes set, so no list shows it without them.
        setStatus('CONTINUED_AS_NEW');
        const continueAsNew = makeContinueAsNewFunc<typeof job>({
          typedSearchAttributes: [
            { key: Oz0Status, value: 'running' },
            { key: Oz0Tenant, value: spec.tenant },
            // The spec's tools, and those a live session used so far (its node described them into the settings).
            { key: Oz0Tools, value: Object.keys(ctx.settings.tools) },
          ],
        });
        await questions.sent();
        await continueAsNew({ tenant: spec.tenant, steps: spec.steps.slice(i) }, next);
      }
      if ('call' in step) {
        const placed = placeCall(ctx);
        await makeCall(ctx, placed, step, defaultKey(jobId, run, placed.activityId), { session: null, record });
        continue;
      }
      const n = ++counters.sessions;
      const calls = scriptedCalls(step);
      if (calls) await runScriptedSession(ctx, calls, n, record);
      else if ('harness' in step.session) await live.runHarness(step.session, n, record);
      else if ('external' in step.session) await live.runExternal(step.session, n, record);
    }
    await condition(allHandlersFinished);
    setStatus('COMPLETED');
    return trace();
  } catch (err) {
    if (isCancellation(err)) setStatus('CANCELED');
    // A failure the workflow throws fails the job (a lost session's call that may have run, T4); anything else fails
    // only this workflow task, and the task's commands go with it.
    else if (!(err instanceof ContinueAsNew)) setStatus('FAILED');
    throw err;
  } finally {
    if (!continuing) {
      await stopSandboxes(jobId, spec.tenant, ctx.sandboxQueues);
      // A10: the last answer's notice, given a moment to reach its webhook before the job closes (a run that
      // continues as new gave it that moment before it did).
      await questions.sent();
    }
  }
}

/** Stops the job's sandboxed servers on every node that started one and was not lost since (forgetLostNode). */
async function stopSandboxes(jobId: string, tenant: string, queues: Set<string>): Promise<void> {
  await CancellationScope.nonCancellable(async () => {
    await Promise.all(
      [...queues].map(async (taskQueue) => {
        const { stopSandboxes: stop } = proxyActivities<Activities>({
          taskQueue,
          priority: { fairnessKey: tenant },
          scheduleToStartTimeout: '10s',
          startToCloseTimeout: '30s',
          retry: { maximumAttempts: 1 },
        });
        try {
          await stop(jobId, tenant);
        } catch (err) {
          log.warn('could not stop sandboxed servers', { taskQueue, error: String(err) });
        }
      }),
    );
  });
}
