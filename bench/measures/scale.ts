/**
 * oz0 as its work grows (SPEC N4, N5; issue 54), each at two sizes in one run (the small one the control):
 * - (N4) calls of one tenant that its policy says `confirm`, all arriving at once: how many reached `waiting`, how
 *   long that took, how many failed, how many Updates the tenant's policy workflow took for them, and what
 *   `oz0 call list` costs with them all waiting;
 * - (N4) a cap of 40 under 2,000 calls of 100 ms, and of 2 s (so that it binds), on a node of 50 slots, against the
 *   same load uncapped on 40 slots:
 *   every call made once, the most at once, none failed, the wall time of each, and the limiter's Updates;
 * - (N5) live sessions on a node of 40 slots, each agent calling as fast as it is answered: every call answered, a
 *   call's p99 against one session's alone.
 * What the server saw comes from the probe server's own log (test/fixtures/probe-server.js).
 */
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { listWaitingCalls } from '../../client/calls';
import { openSession } from '../../client/sessions';
import { tenantStatus } from '../../client/tenants';
import { policyTargetOf } from '../../common/policy-client';
import { Oz0Status, Oz0Tenant } from '../../model/job';
import { policyWorkflowId } from '../../model/policy-rules';
import { sharesWorkflowId } from '../../model/shares';
import { turnSignal } from '../../model/messages';
import { timestampMs } from '../../common/time';
import { fixed, meanAtOnce, mostAtOnce, percentile, sleep, untilEnded } from '../common';
import type { Row } from '../common';
import { benchConfig, withNode } from '../env';
import type { BenchEnv } from '../env';

export interface ScaleOptions {
  /** Calls waiting for a person: the control's count, then the load's. */
  waiting: [number, number];
  /**
   * Calls under the cap of 40 (and the same uncapped on 40 slots), and how long each takes: 100 ms calls never fill 40
   * slots on this machine (a node starts ~30 calls a second), calls of 2 s do, so the cap binds.
   */
  capped: { calls: number; ms: number }[];
  /** Live sessions: the control's count, then the load's; calls each. */
  sessions: [number, number];
  sessionCalls: number;
  /** Which parts run (all by default). */
  parts: Array<'waiting' | 'caps' | 'sessions'>;
}

function probeConfig(env: BenchEnv, taskQueue: string, log: string, extra: Record<string, unknown> = {}) {
  const probe = path.join(env.root, 'test', 'fixtures', 'probe-server.js');
  return benchConfig(env, taskQueue, {
    servers: { probe: { command: 'node', args: [probe], env: { PROBE_LOG: log } } },
    tools: { '*': { timeoutSeconds: 600, maxAttempts: 1 } },
    ...extra,
  });
}

/** Starts one-call jobs, 100 at a time; their ids. */
async function startJobs(client: Client, taskQueue: string, tenant: string, n: number, call: string, ms: number) {
  const ids = Array.from({ length: n }, (_, i) => `${taskQueue}-${tenant}-${i}`);
  for (let i = 0; i < n; i += 100)
    await Promise.all(
      ids.slice(i, i + 100).map((workflowId) =>
        client.workflow.start('job', {
          taskQueue,
          workflowId,
          args: [{ tenant, steps: [{ call, args: { ms } }] }],
          priority: { fairnessKey: tenant },
        }),
      ),
    );
  return ids;
}

/** Updates a workflow's runs took, by name, and how many asks they carried in all (from each run's history). */
async function updatesOf(client: Client, workflowId: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  for await (const run of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
    const history = await client.workflow.getHandle(workflowId, run.runId).fetchHistory();
    for (const e of history.events ?? []) {
      const name = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name;
      if (name) counts[name] = (counts[name] ?? 0) + 1;
    }
  }
  return counts;
}

function rssMiB(): number {
  return Math.round(process.memoryUsage().rss / 2 ** 20);
}

/** N4: `n` calls asking a person at once. */
async function waitingCalls(env: BenchEnv, n: number, round: string) {
  const taskQueue = `oz0-scale-wait-${round}-${process.pid}`;
  const log = path.join(env.dir, `${taskQueue}.jsonl`);
  const tenant = env.id(`people-${round}`);
  const config = probeConfig(env, taskQueue, log, {
    tenants: { [tenant]: { policy: { 'probe.*': 'confirm' } } },
    node: { slots: 100 },
  });
  return withNode(env, config, async () => {
    const before = rssMiB();
    const t0 = performance.now();
    const ids = await startJobs(env.client, taskQueue, tenant, n, 'probe.hang', 10);
    const query = `${Oz0Tenant.name} = '${tenant}' AND ${Oz0Status.name} = 'waiting'`;
    let waiting = 0;
    const deadline = Date.now() + 1_800_000;
    while (Date.now() < deadline) {
      // On a cluster just set up, the search attributes a node registered may not be queryable for a few seconds.
      waiting = (await env.client.workflow.count(query).catch(() => ({ count: 0 }))).count;
      if (waiting >= n) break;
      await sleep(500);
    }
    const tookMs = performance.now() - t0;
    const failed = (await env.client.workflow.count(`${Oz0Tenant.name} = '${tenant}' AND ExecutionStatus = 'Failed'`))
      .count;
    const l0 = performance.now();
    const listed = await listWaitingCalls(env.client, { tenant });
    const listMs = performance.now() - l0;
    const s0 = performance.now();
    await tenantStatus(env.client, policyTargetOf(config, env.client), tenant);
    const statusMs = performance.now() - s0;
    const rss = rssMiB() - before;
    const own = await updatesOf(env.client, policyWorkflowId(tenant));
    // A hundred at a time (10,000 at once pass the server's deadline), and a clean-up that fails loses no figure.
    for (let i = 0; i < ids.length; i += 100)
      await Promise.allSettled(
        ids.slice(i, i + 100).map((id) => env.client.workflow.getHandle(id).terminate('bench: measured')),
      );
    return {
      n,
      waiting,
      failed,
      seconds: tookMs / 1000,
      listMs,
      listed: listed.calls.length,
      unreachable: listed.unreachable.length,
      statusMs,
      rssMiB: rss,
      updates: own.watchQuestions ?? 0,
      singles: own.watchQuestion ?? 0,
      sent: readReceived(log).filter((e) => e.event === 'start').length,
    };
  });
}

/** N4: `n` calls of `ms` of one tenant, capped at 40 on 50 slots, or uncapped on 40 slots. */
async function cappedCalls(env: BenchEnv, n: number, ms: number, capped: boolean) {
  const taskQueue = `oz0-scale-cap-${capped ? 'on' : 'off'}-${ms}-${process.pid}`;
  const log = path.join(env.dir, `${taskQueue}.jsonl`);
  const tenant = env.id(capped ? 'capd' : 'free');
  const config = probeConfig(env, taskQueue, log, {
    tenants: capped ? { [tenant]: { limits: { maxRunningCalls: 40 } } } : {},
    node: { slots: capped ? 50 : 40, reserveSlots: 0 },
  });
  return withNode(env, config, async () => {
    const t0 = performance.now();
    const ids = await startJobs(env.client, taskQueue, tenant, n, 'probe.hang', ms);
    // Counted in visibility, not by a result() each: 2,000 long polls at once pass the server's namespace poller limit
    // (RESOURCE_EXHAUSTED on the client's wait, while the jobs themselves complete).
    const ofTenant = `${Oz0Tenant.name} = '${tenant}'`;
    await untilEnded(env.client, ofTenant, n, 1_200_000, 500);
    const seconds = (performance.now() - t0) / 1000;
    const failed = (await env.client.workflow.count(`${ofTenant} AND ExecutionStatus != 'Completed'`)).count;
    const starts = readReceived(log).filter((e) => e.event === 'start' && e.tool === 'hang');
    const most = mostAtOnce(log);
    const mean = meanAtOnce(log);
    const counts = capped ? await updatesOf(env.client, sharesWorkflowId(tenant)) : {};
    const handOver = capped ? await handOverOf(env.client, ids.slice(-100), log) : undefined;
    return {
      handOver,
      n,
      ms,
      seconds,
      failed,
      made: starts.length,
      distinct: new Set(starts.map((e) => e.key)).size,
      most,
      mean,
      takeUpdates: counts.takeMany ?? 0,
    };
  });
}

/**
 * Where a permit's hand-over spends its time, for calls that waited for their turn (medians, ms): a call's end (the
 * last one before the turn, on the probe server) to its job's turn signal (the permit given back, granted on); the
 * signal to the call's activity scheduled again (the job's workflow task); scheduled to started (matching); started
 * to the call's start on the server (its permit claimed).
 */
async function handOverOf(client: Client, ids: string[], log: string) {
  const ends = readReceived(log)
    .filter((e) => e.event === 'end')
    .map((e) => e.t as number)
    .sort((a, b) => a - b);
  const startOf = new Map(
    readReceived(log)
      .filter((e) => e.event === 'start')
      .map((e) => [String(e.key).split('/')[0], e.t as number]),
  );
  const parts = {
    endToTurn: [] as number[],
    turnToScheduled: [] as number[],
    toStarted: [] as number[],
    toCall: [] as number[],
  };
  for (const id of ids) {
    const events = (await client.workflow.getHandle(id).fetchHistory()).events ?? [];
    const turn = events.find((e) => e.workflowExecutionSignaledEventAttributes?.signalName === turnSignal.name);
    const call = startOf.get(id);
    if (!turn || call === undefined) continue;
    const after = events.filter((e) => Number(e.eventId) > Number(turn.eventId));
    const scheduled = after.find((e) => e.activityTaskScheduledEventAttributes);
    const started = after.find((e) => e.activityTaskStartedEventAttributes);
    if (!scheduled || !started) continue;
    const at = timestampMs(turn.eventTime);
    const end = ends.filter((t) => t <= at).pop();
    if (end !== undefined) parts.endToTurn.push(at - end);
    parts.turnToScheduled.push(timestampMs(scheduled.eventTime) - at);
    parts.toStarted.push(timestampMs(started.eventTime) - timestampMs(scheduled.eventTime));
    parts.toCall.push(call - timestampMs(started.eventTime));
  }
  const median = (v: number[]) => Math.round(percentile(v, 50));
  return {
    calls: parts.toCall.length,
    endToTurn: median(parts.endToTurn),
    turnToScheduled: median(parts.turnToScheduled),
    toStarted: median(parts.toStarted),
    toCall: median(parts.toCall),
  };
}

/** N5: `n` external sessions on a node of 40 slots, each making `calls` calls one after another. */
async function liveSessions(env: BenchEnv, n: number, calls: number, round: string) {
  const taskQueue = `oz0-scale-live-${round}-${process.pid}`;
  const log = path.join(env.dir, `${taskQueue}.jsonl`);
  const tenant = env.id(`live-${round}`);
  const config = probeConfig(env, taskQueue, log, { node: { slots: 40 } });
  return withNode(env, config, async () => {
    const before = rssMiB();
    const jobs = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        env.client.workflow.start('job', {
          taskQueue,
          workflowId: `${taskQueue}-${i}`,
          args: [{ tenant, steps: [{ session: { external: true } }] }],
        }),
      ),
    );
    const sessions = await Promise.all(jobs.map((h) => openSession(env.client, h.workflowId)));
    // The node and its sessions' clients share this process: what each open session costs them together.
    const perSessionMiB = (rssMiB() - before) / n;
    const latencies: number[] = [];
    let errors = 0;
    await Promise.all(
      sessions.map(async (s) => {
        for (let i = 0; i < calls; i++) {
          const t = performance.now();
          const answer = await s.callTool('probe.hang', { ms: 20 }).catch(() => ({ isError: true }));
          latencies.push(performance.now() - t);
          if (answer.isError) errors++;
        }
        await s.close({ done: true });
      }),
    );
    await Promise.all(jobs.map((h) => h.result().catch(() => undefined)));
    return {
      n,
      calls: latencies.length,
      errors,
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      perSessionMiB,
    };
  });
}

export async function measureScale(env: BenchEnv, opts: ScaleOptions): Promise<{ rows: Row[]; data: object }> {
  const waits: Array<Awaited<ReturnType<typeof waitingCalls>>> = [];
  const runs = (part: ScaleOptions['parts'][number]) => opts.parts.length === 0 || opts.parts.includes(part);
  if (runs('waiting')) for (const [i, n] of opts.waiting.entries()) waits.push(await waitingCalls(env, n, `w${i}`));
  const caps: Array<{
    capped: Awaited<ReturnType<typeof cappedCalls>>;
    free: Awaited<ReturnType<typeof cappedCalls>>;
  }> = [];
  if (runs('caps'))
    for (const { calls, ms } of opts.capped)
      caps.push({ capped: await cappedCalls(env, calls, ms, true), free: await cappedCalls(env, calls, ms, false) });
  const lives: Array<Awaited<ReturnType<typeof liveSessions>>> = [];
  if (runs('sessions'))
    for (const [i, n] of opts.sessions.entries()) lives.push(await liveSessions(env, n, opts.sessionCalls, `s${i}`));
  const [, big] = waits;
  const rows: Row[] = [
    ...waits.map((w) => ({
      measure: `(N4) ${w.n} calls asking a person at once, one tenant`,
      figure:
        `${w.waiting} waiting in ${fixed(w.seconds, 1)} s, ${w.failed} failed, ${w.sent} sent; its policy took ` +
        `${w.updates} batches (${w.singles} single asks); call list ${fixed(w.listMs, 0)} ms (${w.listed}); ` +
        `node +${w.rssMiB} MiB`,
      ...(w === big
        ? { target: 'all wait, none failed', met: w.waiting >= w.n && w.failed === 0 && w.sent === 0 }
        : {}),
    })),
    ...waits.map((w) => ({
      measure: `(N3) \`oz0 call list\` and \`oz0 tenant status\` with ${w.n} calls waiting for a person`,
      figure: `list ${fixed(w.listMs, 0)} ms (${w.listed} listed, ${w.unreachable} asked in vain); status ${fixed(w.statusMs, 0)} ms`,
      target: 'each ≤ 2 s, every call listed',
      met: w.listMs <= 2000 && w.statusMs <= 2000 && w.listed >= w.n,
    })),
    ...caps.map(({ capped, free }) => ({
      measure: `(N4) a cap of 40: ${capped.n} calls of ${capped.ms} ms on 50 slots, against uncapped on 40 slots`,
      figure:
        `${fixed(capped.seconds, 1)} s against ${fixed(free.seconds, 1)} s (${fixed(capped.seconds / free.seconds, 2)} ×); ` +
        `most at once ${capped.most} (uncapped ${free.most}), on average ${fixed(capped.mean, 1)} (${fixed(free.mean, 1)}); made ${capped.made} (${capped.distinct} keys), ` +
        `${capped.failed} failed; the limiter took ${capped.takeUpdates} batches` +
        (capped.handOver?.calls
          ? `; a hand-over (median of ${capped.handOver.calls} calls in line): end to turn ${capped.handOver.endToTurn} ms, ` +
            `to scheduled ${capped.handOver.turnToScheduled}, to started ${capped.handOver.toStarted}, ` +
            `to the call ${capped.handOver.toCall}`
          : ''),
      target: '≤ 1.1 ×, at most 40 at once, none failed',
      met:
        capped.seconds / free.seconds <= 1.1 &&
        capped.most <= 40 &&
        capped.failed === 0 &&
        capped.distinct === capped.n &&
        capped.made === capped.n,
    })),
    ...lives.map((l, i) => ({
      measure: `(N5) ${l.n} live sessions on a node of 40 slots, ${opts.sessionCalls} calls each`,
      figure:
        `${l.calls - l.errors} of ${l.calls} answered; p50 ${fixed(l.p50, 0)} ms, p99 ${fixed(l.p99, 0)} ms; ` +
        `${fixed(l.perSessionMiB, 2)} MiB a session open (node and client)` +
        (i > 0 ? ` (${fixed(l.p99 / lives[0].p99, 1)} × the control's p99)` : ''),
      ...(i > 0
        ? { target: 'all answered, p99 ≤ 3 × the control', met: l.errors === 0 && l.p99 <= 3 * lives[0].p99 }
        : {}),
    })),
  ];
  return { rows, data: { waits, caps, lives } };
}
