/**
 * N1: many jobs open at once on two `oz0 worker` processes, as a platform runs them — most of them waiting: on a call
 * queued behind the nodes' slots, on a long call, on a person, on an agent that has not come yet. In every ten jobs:
 * four of three short calls, one long call, three calls their policy says `confirm` (nobody answers: each ends after
 * its confirm timeout with nothing sent), two external sessions whose agent never comes (each ends at its timeout).
 *
 * Measured on the server's side: every job finished, each call once (the probe server's own log), how many were open at
 * once (visibility), each node's resident memory at its peak against before (per open job of its share), the workflow
 * cache's forced evictions and what a replay after one cost (the SDK's own series on each node's metrics port), and the
 * Temporal server's CPU per call (the dev server's process, or the cluster's from its control file).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { readReceived } from '../../examples/common';
import { Oz0Tenant } from '../../model/job';
import { killTree, startWorker } from '../../worker/processes';
import { freePort } from '../../worker/dev-server';
import { cpuSeconds, fixed, sleep, untilEnded } from '../common';
import type { Row } from '../common';
import { writeBenchConfig } from '../env';
import type { BenchEnv } from '../env';

export interface OpenJobsOptions {
  jobs: number;
  /** Slots on each of the two nodes. */
  slots: number;
  /** The long call's length, and how long a person or an agent is waited for (s). */
  longSeconds: number;
  waitSeconds: number;
}

type Kind = 'queued' | 'long' | 'person' | 'session';
const MIX: Kind[] = [
  'queued',
  'queued',
  'queued',
  'queued',
  'long',
  'person',
  'person',
  'person',
  'session',
  'session',
];
/** Calls each kind makes on the server. */
const CALLS: Record<Kind, number> = { queued: 3, long: 1, person: 0, session: 0 };

function residentMiB(pid: number): number {
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    return Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024;
  } catch {
    return 0;
  }
}

/**
 * The sum of a Prometheus series (every label set) on a node's metrics port, by a pattern of its name (the SDK's names
 * carry unit and `_total` suffixes); NaN when it has none.
 */
async function series(port: number, name: RegExp): Promise<number> {
  const text = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
  let sum = NaN;
  for (const line of text.split('\n')) {
    const metric = /^([\w:]+)(\{[^}]*\})? (\S+)/.exec(line);
    if (!metric || !name.test(metric[1])) continue;
    sum = (Number.isNaN(sum) ? 0 : sum) + Number(metric[3]);
  }
  return sum;
}

export async function measureOpenJobs(env: BenchEnv, opts: OpenJobsOptions): Promise<{ rows: Row[]; data: object }> {
  const taskQueue = `oz0-open-${process.pid}`;
  const log = path.join(env.dir, `${taskQueue}.jsonl`);
  const people = env.id('open-people');
  const work = env.id('open-work');
  const probe = path.join(env.root, 'test', 'fixtures', 'probe-server.js');
  const base = JSON.parse(
    fs.readFileSync(
      writeBenchConfig(env, taskQueue, {
        servers: { probe: { command: 'node', args: [probe], env: { PROBE_LOG: log } } },
        tools: { '*': { timeoutSeconds: 600, maxAttempts: 1, confirmTimeoutSeconds: opts.waitSeconds } },
        tenants: { [people]: { policy: { 'probe.*': 'confirm' } } },
      }),
      'utf8',
    ),
  ) as { node: Record<string, unknown> };
  const nodes = await Promise.all(
    ['a', 'b'].map(async (name) => {
      const metricsPort = await freePort();
      const file = path.join(env.dir, `${taskQueue}-${name}.config.json`);
      const node = { ...base.node, stateDir: path.join(env.dir, `state-${taskQueue}-${name}`), slots: opts.slots };
      fs.writeFileSync(file, JSON.stringify({ ...base, node: { ...node, metricsPort } }));
      return { name, file, metricsPort };
    }),
  );
  const workers: ChildProcess[] = [];
  try {
    // Each node's warnings and errors are kept past the run (its temp folder is not): a lost call's why is in them.
    const logs = path.join(env.root, '.oz0', 'bench-logs', `open-${new Date().toISOString().replace(/[:.]/g, '-')}`);
    const procs = await Promise.all(
      nodes.map(
        async (n) =>
          (
            await startWorker(n.file, `bench-open-${n.name}`, workers, {
              logFile: path.join(logs, `node-${n.name}.log`),
              env: { OZ0_LOG_LEVEL: 'warn' },
            })
          ).proc.pid!,
      ),
    );
    await sleep(2000);
    const before = procs.map(residentMiB);
    const peak = [...before];
    const serverCpu0 = cpuSeconds(env.server.pid);
    const spec = (kind: Kind) =>
      kind === 'queued'
        ? { tenant: work, steps: [0, 1, 2].map(() => ({ call: 'probe.hang', args: { ms: 200 } })) }
        : kind === 'long'
          ? { tenant: work, steps: [{ call: 'probe.hang', args: { ms: opts.longSeconds * 1000 } }] }
          : kind === 'person'
            ? { tenant: people, steps: [{ call: 'probe.hang', args: { ms: 10 } }] }
            : { tenant: work, steps: [{ session: { external: true, timeoutSeconds: opts.waitSeconds } }] };
    const kinds = Array.from({ length: opts.jobs }, (_, i) => MIX[i % MIX.length]);
    const t0 = performance.now();
    let mostOpen = 0;
    let sampling = true;
    const ofRun = `(${Oz0Tenant.name} = '${people}' OR ${Oz0Tenant.name} = '${work}')`;
    const sampler = (async () => {
      while (sampling) {
        procs.forEach((pid, i) => (peak[i] = Math.max(peak[i], residentMiB(pid))));
        // On a cluster just set up, the search attributes the nodes registered may not be queryable for a while.
        const open = (
          await env.client.workflow.count(`${ofRun} AND ExecutionStatus = 'Running'`).catch(() => ({ count: 0 }))
        ).count;
        mostOpen = Math.max(mostOpen, open);
        await sleep(2000);
      }
    })();
    for (let i = 0; i < kinds.length; i += 100)
      await Promise.all(
        kinds.slice(i, i + 100).map((kind, j) =>
          env.client.workflow.start('job', {
            taskQueue,
            workflowId: `${taskQueue}-${kind}-${i + j}`,
            args: [spec(kind)],
            priority: { fairnessKey: kind === 'person' ? people : work },
          }),
        ),
      );
    const startedSeconds = (performance.now() - t0) / 1000;
    await untilEnded(env.client, ofRun, opts.jobs, 60 * 60_000, 2000);
    sampling = false;
    await sampler;
    const seconds = (performance.now() - t0) / 1000;
    const finished = (await env.client.workflow.count(`${ofRun} AND ExecutionStatus = 'Completed'`)).count;
    const starts = readReceived(log).filter((e) => e.event === 'start' && e.tool === 'hang');
    const expected = kinds.reduce((n, k) => n + CALLS[k], 0);
    const serverCpuPerCall = (cpuSeconds(env.server.pid) - serverCpu0) / Math.max(1, starts.length);
    // A counter the SDK never moved is not served at all: none.
    const counted = (v: number) => (Number.isNaN(v) ? 0 : v);
    const evictions = await Promise.all(
      nodes.map(async (n) => counted(await series(n.metricsPort, /sticky_cache_total_forced_eviction(_total)?$/))),
    );
    const misses = await Promise.all(
      nodes.map(async (n) => counted(await series(n.metricsPort, /sticky_cache_miss(_total)?$/))),
    );
    const replaySum = await Promise.all(
      nodes.map((n) => series(n.metricsPort, /workflow_task_replay_latency(_seconds)?_sum$/)),
    );
    const replayCount = await Promise.all(
      nodes.map((n) => series(n.metricsPort, /workflow_task_replay_latency(_seconds)?_count$/)),
    );
    const grown = peak.map((p, i) => p - before[i]);
    const data = {
      jobs: opts.jobs,
      slots: opts.slots,
      startedSeconds,
      seconds,
      mostOpen,
      finished,
      made: starts.length,
      keys: new Set(starts.map((e) => e.key)).size,
      expected,
      beforeMiB: before,
      peakMiB: peak,
      perOpenJobMiB: grown.reduce((a, b) => a + b, 0) / Math.max(1, mostOpen),
      evictions,
      misses,
      replays: replayCount,
      replayMeanMs: replaySum.map((s, i) => (replayCount[i] > 0 ? (s / replayCount[i]) * 1000 : NaN)),
      serverCpuMsPerCall: serverCpuPerCall * 1000,
    };
    const rows: Row[] = [
      {
        measure: `(N1) ${opts.jobs} jobs at once on two nodes of ${opts.slots} slots (queued, long, person, agent)`,
        figure:
          `${data.finished} of ${opts.jobs} finished in ${fixed(seconds, 0)} s (all started in ${fixed(startedSeconds, 0)} s), ` +
          `${data.mostOpen} open at once at most; ${data.made} calls made of ${expected} (${data.keys} keys)`,
        target: 'all finish, each call once',
        met: data.finished === opts.jobs && data.made === expected && data.keys === expected,
      },
      {
        measure: '(N1) a node’s memory and cache with them open',
        figure:
          `${before.map((b, i) => `${fixed(b, 0)} → ${fixed(peak[i], 0)} MiB`).join(', ')}: ` +
          `${fixed(data.perOpenJobMiB * 1024, 0)} KiB an open job; forced evictions ${evictions.join(' + ')}, ` +
          `cache misses ${misses.join(' + ')}, workflow tasks replayed ${replayCount.join(' + ')} ` +
          `(mean ${data.replayMeanMs.map((m) => fixed(m, 1)).join(' / ')} ms)`,
      },
      {
        measure: '(N1) the Temporal server’s CPU per call',
        figure: `${fixed(data.serverCpuMsPerCall, 1)} ms a call (every job’s workflow tasks included)`,
      },
    ];
    return { rows, data: { ...data, logs } };
  } finally {
    for (const w of workers) if (w.exitCode === null) killTree(w.pid!);
  }
}
