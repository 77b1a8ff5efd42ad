/**
 * (e) Cost per call late in a very long job: one job of `calls` sequential echo calls that continues as new every
 * `perRun` calls. Per-call latency is read from the workflow histories, the server's clock: from one call's
 * ActivityTaskScheduled to the next one's (the last call of the job: to the job's completion), so each call
 * includes the workflow task that follows it. Calls 1–100 against the last 100 (after a warm-up job on the same
 * node); events, calls and mean call time of each run.
 */
import { temporal } from '@temporalio/proto';
import { timestampMs } from '../../common/time';
import { fixed, mean, percentile } from '../common';
import type { Row } from '../common';
import { benchConfig, echoSteps, withNode } from '../env';
import type { BenchEnv } from '../env';

const EventType = temporal.api.enums.v1.EventType;

const WARM_UP_CALLS = 100;

export interface LongJobOptions {
  calls: number;
  perRun: number;
}

interface RunStats {
  runId: string;
  events: number;
  calls: number;
  meanCallMs: number;
}

export async function measureLongJob(env: BenchEnv, opts: LongJobOptions) {
  const taskQueue = 'oz0-long';
  const config = benchConfig(env, taskQueue, { jobs: { continueAsNewAfterCalls: opts.perRun } });
  const workflowId = env.id('long');
  const started = performance.now();
  const firstRunId = await withNode(env, config, async () => {
    // A fresh worker's first few dozen workflow tasks reach it in ~2 ms, then in ~35 ms for as long as it runs
    // (the dev server's sticky-queue dispatch; a bare worker shows the same): warm up first, so calls 1–100 are
    // not measured in a phase that has nothing to do with how long the job is.
    await env.client.workflow.execute('job', {
      taskQueue,
      workflowId: env.id('long-warm-up'),
      args: [{ tenant: 'bench', steps: echoSteps(WARM_UP_CALLS) }],
    });
    const handle = await env.client.workflow.start('job', {
      taskQueue,
      workflowId,
      args: [{ tenant: 'bench', steps: echoSteps(opts.calls) }],
    });
    await handle.result();
    return handle.firstExecutionRunId;
  });
  const wallSeconds = (performance.now() - started) / 1000;

  // Walk the chain of runs, oldest first.
  const latencies: number[] = [];
  const runs: RunStats[] = [];
  const gaps: number[] = [];
  let lastCompleted: number | undefined;
  for (let runId: string | undefined = firstRunId; runId; ) {
    const history = await env.client.workflow.getHandle(workflowId, runId).fetchHistory();
    const events = history.events ?? [];
    const scheduled: number[] = [];
    let end: number | undefined;
    let next: string | undefined;
    for (const e of events) {
      const t = timestampMs(e.eventTime);
      if (
        e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED &&
        e.activityTaskScheduledEventAttributes?.activityType?.name === 'callTool'
      ) {
        if (scheduled.length === 0 && lastCompleted !== undefined) gaps.push(t - lastCompleted);
        scheduled.push(t);
      } else if (e.eventType === EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED) lastCompleted = t;
      else if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED) end = t;
      else if (e.eventType === EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW)
        next = e.workflowExecutionContinuedAsNewEventAttributes?.newExecutionRunId ?? undefined;
    }
    const own = scheduled.map((t, i) =>
      i + 1 < scheduled.length ? scheduled[i + 1] - t : end !== undefined ? end - t : NaN,
    );
    // The last call of a run that continued as new is left out: its time includes the continue-as-new (in `gaps`).
    latencies.push(...own);
    runs.push({
      runId,
      events: events.length,
      calls: scheduled.length,
      meanCallMs: mean(own.filter(Number.isFinite)),
    });
    runId = next;
  }
  const block = (from: number) => latencies.slice(from, from + 100).filter(Number.isFinite);
  const early = block(0);
  const late = block(latencies.length - 100);
  const ratio = mean(late) / mean(early);
  const rows: Row[] = [
    {
      measure: `(e) ${opts.calls} calls, calls ${latencies.length - 99}–${latencies.length} / 1–100`,
      figure:
        `${fixed(ratio, 2)} (${fixed(mean(late))} / ${fixed(mean(early))} ms per call; ` +
        `p50 ${fixed(percentile(late, 50))} / ${fixed(percentile(early, 50))})`,
      target: '≤ 1.05',
      met: ratio <= 1.05,
    },
    {
      measure: `(e) history per run (${runs.length} runs, continuing as new after ${opts.perRun} calls or sooner)`,
      figure:
        `${Math.min(...runs.map((r) => r.events))}–${Math.max(...runs.map((r) => r.events))} events, ` +
        `${Math.min(...runs.map((r) => r.calls))}–${Math.max(...runs.map((r) => r.calls))} calls; ` +
        `mean call ${fixed(Math.min(...runs.map((r) => r.meanCallMs)))}–${fixed(Math.max(...runs.map((r) => r.meanCallMs)))} ms`,
    },
  ];
  return {
    rows,
    data: {
      ...opts,
      wallSeconds,
      early: { meanMs: mean(early), p50Ms: percentile(early, 50) },
      late: { meanMs: mean(late), p50Ms: percentile(late, 50) },
      ratio,
      continueAsNewGapMs: gaps.length ? mean(gaps) : undefined,
      runs,
    },
  };
}
