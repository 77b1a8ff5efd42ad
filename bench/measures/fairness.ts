/**
 * Tenants sharing the platform (SPEC F1-F6, issue 43), in one run:
 * - (F1) beta's one call under acme's flood of one-call jobs on a node of 10 slots and a call of 300 ms: how long
 *   after its job started it started, and how many of acme's calls went first; and the same on a dev server with
 *   Temporal's fairness off, for the record (not on a cluster);
 * - (F1) acme and beta weighted 3 and 1, both flooding: the share of the first calls each got;
 * - (F3) a cap of 5 across two nodes under a flood: the most calls the server ran at once;
 * - (F6) one sequential call of a tenant under a cap (not binding) and a server cap, against one of a tenant with
 *   none, interleaved on the same node; and, for the record, one under a rate (it asks its limiter every call).
 * What the server saw comes from the probe server's own log (test/fixtures/probe-server.js): each request's start and
 * end, by its process and request id.
 */
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { createNode } from '../../worker/node';
import type { LoadedConfig } from '../../common/config';
import { DEV_SERVER_DYNAMIC_CONFIG } from '../../worker/dev-server';
import { policyTargetOf } from '../../common/policy-client';
import { setShares } from '../../client/tenants';
import { jobPriority } from '../../model/shares';
import type { JobSpec } from '../../model/schemas';
import { fixed, mean, mostAtOnce, percentile, until } from '../common';
import type { Row } from '../common';
import { benchConfig, openBenchEnv, withNode } from '../env';
import { addTaskParts, noTaskParts } from '../task-parts';
import type { BenchEnv } from '../env';

export interface FairnessOptions {
  /** acme's one-call jobs queued before beta's. */
  flood: number;
  /** Floods measured (beta's wait each time). */
  rounds: number;
  /** Calls of each tenant for the 3 : 1 share. */
  share: number;
  /** Jobs under the cap of 5. */
  capJobs: number;
  /** Sequential calls a job, and rounds, for the cost. */
  costCalls: number;
  costRounds: number;
}

/** A config of this run with the probe server, logging each request's start and end into `log`. */
function probeConfig(env: BenchEnv, taskQueue: string, log: string, extra: Record<string, unknown> = {}) {
  const probe = path.join(env.root, 'test', 'fixtures', 'probe-server.js');
  const { servers, ...rest } = extra as { servers?: object };
  return benchConfig(env, taskQueue, {
    servers: { probe: { command: 'node', args: [probe], env: { PROBE_LOG: log } }, ...servers },
    tools: { '*': { timeoutSeconds: 120, maxAttempts: 1 } },
    ...rest,
  });
}

function hang(tenant: string, ms: number): JobSpec {
  return { tenant, steps: [{ call: 'probe.hang', args: { ms } }] };
}

/** Starts jobs as a platform does (their tenant as fairness key), 50 at a time; resolves to their ids in order. */
async function flood(client: Client, taskQueue: string, specs: JobSpec[], id: (i: number) => string) {
  const ids = specs.map((_, i) => id(i));
  for (let i = 0; i < specs.length; i += 50) {
    await Promise.all(
      specs.slice(i, i + 50).map((spec, j) =>
        client.workflow.start('job', {
          taskQueue,
          workflowId: ids[i + j],
          args: [spec],
          priority: jobPriority(spec),
        }),
      ),
    );
  }
  return ids;
}

/** Ends every job still running on a queue: one batch operation of Temporal's. */
async function terminateQueue(client: Client, taskQueue: string): Promise<void> {
  await client.workflowService.startBatchOperation({
    namespace: client.options.namespace,
    jobId: `oz0-bench-end-${taskQueue}-${Date.now()}`,
    reason: 'bench: the flood is measured',
    visibilityQuery: `TaskQueue = '${taskQueue}' AND ExecutionStatus = 'Running'`,
    terminationOperation: {},
  });
}

/** The server's starts of `hang`, in order: when, and the job its key names. */
function starts(log: string): Array<{ t: number; job: string }> {
  return readReceived(log)
    .filter((e) => e.event === 'start' && e.tool === 'hang')
    .map((e) => ({ t: e.t as number, job: String(e.key).split('/')[0] }));
}

/** F1: beta's one call under acme's flood; how long it waited after its job started, and who went first. */
async function betaUnderFlood(env: BenchEnv, opts: FairnessOptions, round: number, unfair = false) {
  const taskQueue = `oz0-flood-${round}-${process.pid}`;
  const log = path.join(env.dir, `${taskQueue}.jsonl`);
  // The control's server has fairness off on purpose: its node need not check, and warn, that it is.
  const config = probeConfig(env, taskQueue, log, { node: { slots: 10, fairnessProbe: !unfair } });
  const found = await withNode(env, config, async () => {
    const acme = env.id(`acme-${round}`);
    await flood(env.client, taskQueue, Array(opts.flood).fill(hang(acme, 300)), (i) => env.id(`flood-acme-${i}`));
    const backlog = opts.flood - starts(log).length;
    const [beta] = await flood(env.client, taskQueue, [hang(env.id(`beta-${round}`), 300)], () => env.id('flood-beta'));
    const startedAt = Date.now();
    const seen = await until("beta's call", () => starts(log).find((s) => s.job === beta), 300_000, 20);
    const acmeFirst = starts(log).filter((s) => s.t < seen.t && s.job.startsWith('flood-acme')).length;
    const before = starts(log).filter((s) => s.t < startedAt).length;
    // Its history has its call's start once the call ended (Temporal writes it then): beta's job ends first.
    await env.client.workflow.getHandle(beta).result();
    // Where beta's wait went, from its history: its first workflow task's dispatch and run, its call's dispatch.
    const parts = noTaskParts();
    await addTaskParts(env.client, beta, parts);
    const [taskDispatch, taskRun, activityDispatch] = [parts.taskDispatch, parts.taskRun, parts.activityDispatch].map(
      (p) => Math.round(p[0] ?? NaN),
    );
    return {
      waitedMs: seen.t - startedAt,
      acmeFirst: acmeFirst - before,
      backlog,
      taskDispatch,
      taskRun,
      activityDispatch,
    };
  });
  // The rest of the flood ends once the node stopped (its calls in flight finished): none finishes a job ended under it.
  await terminateQueue(env.client, taskQueue);
  return found;
}

/** F1: acme weighted 3, beta 1, both flooding: acme's share of the first calls. */
async function weightedShare(env: BenchEnv, opts: FairnessOptions) {
  const taskQueue = `oz0-share-${process.pid}`;
  const log = path.join(env.dir, `${taskQueue}.jsonl`);
  const config = probeConfig(env, taskQueue, log, { node: { slots: 2, reserveSlots: 0 } });
  // Tenants of this run's own: their shares and limiters live on in a cluster between runs.
  const [acme, beta] = [env.id('acme-w'), env.id('beta-w')];
  await withNode(env, config, () =>
    setShares(env.client, policyTargetOf(config, env.client), config.temporal, acme, { weight: 3 }),
  );
  const specs = Array.from({ length: opts.share * 2 }, (_, i) => hang(i % 2 ? beta : acme, 20));
  const ids = await flood(env.client, taskQueue, specs, (i) => env.id(`share-${i}`));
  const tenantOf = new Map(ids.map((id, i) => [id, specs[i].tenant]));
  await withNode(env, config, () =>
    until('the share', () => (starts(log).length >= opts.share ? true : undefined), 300_000, 20),
  );
  await terminateQueue(env.client, taskQueue);
  const first = starts(log).slice(0, opts.share);
  return first.filter((s) => tenantOf.get(s.job) === acme).length / first.length;
}

/** F3's calls: long enough that a permit's hand-over (a give, a turn told, a claim) is small beside them. */
const CAP_CALL_MS = 1000;

/** F3: a cap of 5 across two nodes, under a flood of `capJobs`: the most the server ran at once. */
async function capAcrossNodes(env: BenchEnv, opts: FairnessOptions) {
  const taskQueue = `oz0-cap-${process.pid}`;
  const log = path.join(env.dir, `${taskQueue}.jsonl`);
  const capped = env.id('capped');
  const config = probeConfig(env, taskQueue, log, {
    tenants: { [capped]: { limits: { maxRunningCalls: 5 } } },
    node: { slots: 10, reserveSlots: 0 },
  });
  const [a, b] = await Promise.all(['a', 'b'].map((n) => createNode({ config, logger: env.logger, name: `cap-${n}` })));
  const t = performance.now();
  await a.runUntil(() =>
    b.runUntil(async () => {
      const ids = await flood(env.client, taskQueue, Array(opts.capJobs).fill(hang(capped, CAP_CALL_MS)), (i) =>
        env.id(`cap-${i}`),
      );
      await Promise.all(ids.map((id) => env.client.workflow.getHandle(id).result()));
    }),
  );
  const seconds = (performance.now() - t) / 1000;
  // How much of the cap the calls used, from the first start to the last end: their time over the cap's.
  const times = starts(log).map((s) => s.t);
  const span = (Math.max(...times) + CAP_CALL_MS - Math.min(...times)) / 1000;
  const used = (times.length * CAP_CALL_MS) / 1000 / (5 * span);
  return { most: mostAtOnce(log), calls: times.length, seconds, used };
}

/** F6: sequential calls of a tenant under caps (not binding), one under a rate, and one with none, interleaved. */
async function cost(env: BenchEnv, opts: FairnessOptions) {
  const taskQueue = `oz0-fair-cost-${process.pid}`;
  const tenant = { free: env.id('free'), capped: env.id('capped'), rated: env.id('rated') };
  const config: LoadedConfig = benchConfig(env, taskQueue, {
    jobs: { continueAsNewAfterCalls: 100_000 },
    tenants: {
      [tenant.capped]: {
        fairness: { weight: 2 },
        limits: { maxRunningCalls: 1000, servers: { reader: { maxRunningCalls: 500 } } },
      },
      [tenant.rated]: { limits: { callsPerSecond: 1000 } },
    },
  });
  const perCall: Record<'free' | 'capped' | 'rated', number[]> = { free: [], capped: [], rated: [] };
  await withNode(env, config, async () => {
    const steps = Array.from({ length: opts.costCalls }, (_, i) => ({ call: 'reader.echo', args: { text: `t${i}` } }));
    const job = async (kind: keyof typeof perCall, n = opts.costCalls) => {
      const t = performance.now();
      await env.client.workflow.execute('job', {
        taskQueue,
        workflowId: env.id(`fair-cost-${kind}`),
        args: [{ tenant: tenant[kind], steps: steps.slice(0, n) }],
        priority: { fairnessKey: tenant[kind] },
      });
      return (performance.now() - t) / n;
    };
    for (const kind of ['free', 'capped', 'rated'] as const) await job(kind, 10);
    for (let r = 0; r < opts.costRounds; r++) {
      // Who goes first changes from round to round: the machine's drift falls on each alike.
      const order = r % 2 ? (['capped', 'free', 'rated'] as const) : (['free', 'capped', 'rated'] as const);
      for (const kind of order) perCall[kind].push(await job(kind));
    }
  });
  return perCall;
}

export async function measureFairness(env: BenchEnv, opts: FairnessOptions & { cluster: boolean }) {
  const floods = [];
  for (let r = 0; r < opts.rounds; r++) floods.push(await betaUnderFlood(env, opts, r));
  let control: Awaited<ReturnType<typeof betaUnderFlood>> | undefined;
  if (!opts.cluster) {
    const unfair = await openBenchEnv(undefined, {
      dynamicConfig: { ...DEV_SERVER_DYNAMIC_CONFIG, 'matching.enableFairness': false },
    });
    try {
      control = await betaUnderFlood(unfair, opts, 0, true);
    } finally {
      await unfair.close();
    }
  }
  const share = await weightedShare(env, opts);
  const cap = await capAcrossNodes(env, opts);
  const perCall = await cost(env, opts);
  const waits = floods.map((f) => f.waitedMs);
  const ratio = share / (1 - share);
  // Paired by round (each round runs the three one after another): the machine's drift between rounds cancels out.
  const paired = (kind: 'capped' | 'rated') =>
    percentile(
      perCall[kind].map((v, i) => v / perCall.free[i]),
      50,
    );
  const costRatio = paired('capped');
  const rows: Row[] = [
    {
      measure: `(F1) beta's call under acme's ${opts.flood} queued calls`,
      figure:
        `${waits.map((w) => fixed(w / 1000, 2)).join(' / ')} s after its job started; acme's first: ` +
        `${floods.map((f) => f.acmeFirst).join(' / ')} (backlogs ${floods.map((f) => f.backlog).join(' / ')}; ` +
        `its task's dispatch + run, its call's dispatch: ` +
        `${floods.map((f) => `${f.taskDispatch} + ${f.taskRun}, ${f.activityDispatch}`).join(' / ')} ms)` +
        (control ? `; fairness off: ${fixed(control.waitedMs / 1000, 1)} s, ${control.acmeFirst} of acme's first` : ''),
      target: '≤ 2 s',
      met: Math.max(...waits) <= 2000,
    },
    {
      measure: '(F1) acme and beta weighted 3 : 1, both flooding',
      figure: `${fixed(ratio, 2)} : 1 (acme ${fixed(share * 100, 0)} % of the first ${opts.share})`,
      target: '3 : 1 ± 20 %',
      met: ratio >= 2.4 && ratio <= 3.6,
    },
    {
      measure: `(F3) a cap of 5 across two nodes, ${opts.capJobs} jobs`,
      figure:
        `at most ${cap.most} at once at the server; the calls used ${fixed(cap.used * 100, 0)} % of the cap ` +
        `(${cap.calls} calls of ${CAP_CALL_MS} ms in ${fixed(cap.seconds, 1)} s)`,
      target: 'exactly 5',
      met: cap.most === 5,
    },
    {
      measure: '(F6) one call under caps / none',
      figure:
        `${fixed(costRatio, 3)}, the median of ${perCall.free.length} rounds' ratios ` +
        `(${fixed(mean(perCall.capped), 2)} / ${fixed(mean(perCall.free), 2)} ms a call)`,
      target: '≤ 1.03',
      met: costRatio <= 1.03,
    },
    {
      measure: '(F6) one call under a rate / none',
      figure: `${fixed(paired('rated'), 3)} (${fixed(mean(perCall.rated), 2)} ms a call: each asks its limiter)`,
    },
  ];
  return { rows, data: { ...opts, floods, control, share, ratio, cap, perCall, costRatio } };
}
