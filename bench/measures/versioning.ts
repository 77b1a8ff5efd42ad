/**
 * Issue 56.3: what Temporal's Worker Versioning costs a call, against patching (oz0 today: unversioned workers,
 * `patched()` markers, which cost nothing per call). Bare workers on one dev server, each on a queue of its own,
 * making the same echo call: unversioned (as oz0 today); one build of a Worker Deployment, its jobs PINNED, made the
 * deployment's current version; and unversioned without eager activity dispatch (on by default from server 1.32,
 * whose change warned it does not go with versioning: what it buys, and whether a versioned worker keeps it).
 *
 * (a) a call in one job of sequential calls: its cycle (one activity scheduled to the next, from the history), mean
 * and p99, and the share of activities the server handed over in its workflow task's answer (eager: started within
 * {@link EAGER_MS} of being scheduled, where one matched through the queue takes 2 ms or more on this machine).
 * (b) calls per second for N jobs of M calls at once. Ratios against unversioned: each round's, beside each other,
 * the median. Then what versioning does at a deploy (./versioning-deploys.ts).
 */
import { fixed, mean, percentile } from '../common';
import type { Row } from '../common';
import { startBareWorker } from '../env';
import type { BenchEnv } from '../env';
import type { BareWorker } from '../bare/worker';
import { timestampMs } from '../../common/time';
import { noTaskParts, taskPartsOf } from '../task-parts';
import { checkDeploys, makeCurrent } from './versioning-deploys';

export interface VersioningOptions {
  /** (a): calls of the one job, and rounds. */
  calls: number;
  rounds: number;
  /** (b): jobs at once, each of `jobCalls` calls, and rounds. */
  jobs: number[];
  jobCalls: number;
  jobRounds: number;
}

const KINDS = ['unversioned', 'pinned', 'noEager'] as const;
type Kind = (typeof KINDS)[number];

const LABEL: Record<Kind, string> = {
  unversioned: 'unversioned',
  pinned: 'PINNED build',
  noEager: 'unversioned, no eager dispatch',
};

/** An activity's started event this close to its scheduled one was written in the same transaction: eager. */
const EAGER_MS = 0.5;

/** The middle value, or the mean of the two middle ones (two rounds' ratios: neither is favoured). */
function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length / 2;
  return Number.isInteger(mid) ? (sorted[mid - 1] + sorted[mid]) / 2 : sorted[Math.floor(mid)];
}

/** A call's cycle in a sequential job: each activity scheduled to the next, the last to the job's end. */
function cycles(events: Parameters<typeof taskPartsOf>[0]): number[] {
  const at = events
    .filter((e) => e.activityTaskScheduledEventAttributes || e.workflowExecutionCompletedEventAttributes)
    .map((e) => timestampMs(e.eventTime));
  return at.slice(1).map((t, i) => t - at[i]);
}

export async function measureVersioning(env: BenchEnv, opts: VersioningOptions) {
  const slots = Math.max(100, ...opts.jobs);
  const deployment = env.id('oz0-bench');
  const workers = {} as Record<Kind, BareWorker>;
  const closeAll = async () => {
    for (const kind of KINDS) await workers[kind]?.close();
    for (const kind of KINDS) delete workers[kind];
  };
  try {
    workers.unversioned = await startBareWorker(env, 'bare-v-plain', slots);
    workers.pinned = await startBareWorker(env, 'bare-v-pinned', slots, {
      deployment: { name: deployment, buildId: 'bench-1' },
    });
    workers.noEager = await startBareWorker(env, 'bare-v-noeager', slots, { eagerActivities: false });
    const toCurrent = await makeCurrent(env, deployment, 'bench-1');
    const job = async (kind: Kind, calls: number) => {
      const workflowId = env.id(`v-${kind}`);
      await env.client.workflow.execute('bareJob', { taskQueue: workers[kind].taskQueue, workflowId, args: [calls] });
      return workflowId;
    };
    for (const kind of KINDS) await job(kind, 10);

    // (a)
    const perCall = Object.fromEntries(KINDS.map((k) => [k, [] as number[]])) as Record<Kind, number[]>;
    const jobMs = Object.fromEntries(KINDS.map((k) => [k, [] as number[]])) as Record<Kind, number[]>;
    const parts = Object.fromEntries(KINDS.map((k) => [k, noTaskParts()])) as Record<
      Kind,
      ReturnType<typeof noTaskParts>
    >;
    const rotate = (r: number) => KINDS.map((_, i) => KINDS[(i + r) % KINDS.length]);
    for (let r = 0; r < opts.rounds; r++) {
      // Each kind goes first in turn, so none always runs on a warmer (or more tired) server.
      for (const kind of rotate(r)) {
        const t = performance.now();
        const id = await job(kind, opts.calls);
        jobMs[kind].push((performance.now() - t) / opts.calls);
        const events = (await env.client.workflow.getHandle(id).fetchHistory()).events ?? [];
        perCall[kind].push(...cycles(events));
        taskPartsOf(events, parts[kind]);
      }
    }

    // (b)
    const perSecond = Object.fromEntries(
      opts.jobs.map((n) => [n, Object.fromEntries(KINDS.map((k) => [k, [] as number[]]))]),
    ) as Record<number, Record<Kind, number[]>>;
    for (const n of opts.jobs) {
      for (let r = 0; r < opts.jobRounds; r++) {
        for (const kind of rotate(r)) {
          const t = performance.now();
          await Promise.all(Array.from({ length: n }, () => job(kind, opts.jobCalls)));
          perSecond[n][kind].push((n * opts.jobCalls) / ((performance.now() - t) / 1000));
        }
      }
    }
    await closeAll();

    const eager = (k: Kind) => {
      const d = parts[k].activityDispatch;
      return `${fixed((100 * d.filter((ms) => ms < EAGER_MS).length) / d.length, 0)} % eager`;
    };
    const rows: Row[] = [];
    for (const kind of ['pinned', 'noEager'] as const) {
      const ratio = median(jobMs[kind].map((v, i) => v / jobMs.unversioned[i]));
      const [m, b] = [perCall[kind], perCall.unversioned];
      rows.push({
        measure: `(a) one call, ${LABEL[kind]} / unversioned`,
        figure:
          `${fixed(ratio, 2)} (mean ${fixed(mean(m))} / ${fixed(mean(b))} ms, p99 ${fixed(percentile(m, 99))} / ` +
          `${fixed(percentile(b, 99))} ms; activities ${eager(kind)} / ${eager('unversioned')})`,
      });
    }
    for (const n of opts.jobs) {
      for (const kind of ['pinned', 'noEager'] as const) {
        const share = median(perSecond[n][kind].map((v, i) => v / perSecond[n].unversioned[i]));
        rows.push({
          measure: `(b) ${n} jobs of ${opts.jobCalls} calls, ${LABEL[kind]} / unversioned`,
          figure: `${fixed(share * 100, 0)} % (${fixed(mean(perSecond[n][kind]), 0)} / ${fixed(mean(perSecond[n].unversioned), 0)} calls/s)`,
        });
      }
    }
    const deploys = await checkDeploys(env);
    rows.push(...deploys.rows);
    return {
      rows,
      data: {
        ...opts,
        slots,
        toCurrentMs: toCurrent,
        msPerCall: jobMs,
        cycles: perCall,
        perSecond,
        deploys: deploys.data,
      },
    };
  } finally {
    await closeAll();
  }
}
