/**
 * (f) A node's peak memory with `calls` calls running at once: an `oz0 worker` process (workflows and activities,
 * as in production) runs `calls` jobs whose one call sleeps on the reader (a plugin server, one process). Beside
 * it, in the same run, the baseline: a bare Temporal worker process (bare/worker.ts, same slots, same SDK
 * defaults) running as many one-activity workflows that make the same call. Peak resident memory is the kernel's
 * high-water mark (VmHWM) of each worker process; their servers are reported apart.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { fixed, sleep, until } from '../common';
import type { Row } from '../common';
import { startBareProcess, writeBenchConfig } from '../env';
import type { BenchEnv } from '../env';
import { descendants, killTree, startWorker } from '../../worker/processes';
import { summarizeHeap, takeHeapSnapshot } from '../heap';
import { otlpSink } from './observability';
import type { HeapSummary } from '../heap';

export interface MemoryOptions {
  calls: number;
  /** Heap snapshots of both workers with every call running (bench/heap.ts); their peaks are then not a figure. */
  heap?: boolean;
}

/** Node's flags for a worker whose heap is snapshotted on SIGUSR2, into `dir`. */
function heapFlags(dir: string): Record<string, string> {
  return { NODE_OPTIONS: `--heapsnapshot-signal=SIGUSR2 --diagnostic-dir=${dir}` };
}

/** A field of /proc/<pid>/status in MiB (VmRSS, VmHWM); undefined once the process is gone. */
function statusMiB(pid: number, field: string): number | undefined {
  try {
    const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

interface Footprint {
  /** Main thread's V8 heap summed by constructor, with every call running (--heap). */
  heap?: HeapSummary;
  idleMiB: number;
  runningMiB: number;
  peakMiB: number;
  serverPeakMiB: number;
  allRunningSeconds: number;
}

/**
 * Starts `calls` one-call jobs with `start`, waits until the server has seen every call start, lets them run
 * together for a while (heartbeats, policy refreshes, a few GCs), then ends them with `end`; reads the worker's
 * memory on the way.
 */
async function footprint(
  pid: number,
  log: string,
  calls: number,
  start: () => Promise<void>,
  end: () => Promise<void>,
  heapDir?: string,
): Promise<Footprint> {
  const idleMiB = statusMiB(pid, 'VmRSS') ?? NaN;
  let serverPeakMiB = 0;
  const sampler = setInterval(() => {
    for (const child of descendants(pid)) serverPeakMiB = Math.max(serverPeakMiB, statusMiB(child, 'VmRSS') ?? 0);
  }, 200);
  try {
    const t0 = performance.now();
    await start();
    const started = () => readReceived(log).filter((r) => r.event === 'start').length;
    await until('every call to be running', () => (started() >= calls ? true : undefined), 180_000);
    const allRunningSeconds = (performance.now() - t0) / 1000;
    await sleep(5000);
    const runningMiB = statusMiB(pid, 'VmRSS') ?? NaN;
    const heap = heapDir ? summarizeHeap(await takeHeapSnapshot(pid, heapDir)) : undefined;
    await end();
    await sleep(500);
    const peakMiB = statusMiB(pid, 'VmHWM') ?? NaN;
    return { idleMiB, runningMiB, peakMiB, serverPeakMiB, allRunningSeconds, ...(heap ? { heap } : {}) };
  } finally {
    clearInterval(sampler);
  }
}

/**
 * The oz0 node: an `oz0 worker` process; its jobs are cancelled at the end, so every call is stopped for real.
 * Traced (O5's memory bound), it exports its spans over OTLP to `otlp`, an endpoint that takes them and drops them.
 */
async function measureOz0(
  env: BenchEnv,
  calls: number,
  heapDir?: string,
  otlp?: string,
): Promise<Footprint & { cancelAllSeconds: number }> {
  const name = otlp ? 'oz0-traced' : 'oz0';
  const taskQueue = `${name}-memory`;
  const log = path.join(env.dir, `memory-${name}-received.jsonl`);
  const file = writeBenchConfig(env, taskQueue, { node: { slots: calls + 100 } }, { OZ0_RECEIVED_LOG: log });
  const workers: ChildProcess[] = [];
  const traced: Record<string, string> = otlp
    ? { OTEL_EXPORTER_OTLP_ENDPOINT: otlp, OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf' }
    : {};
  const { proc } = await startWorker(file, `bench-memory-${name}`, workers, {
    env: { ...traced, ...(heapDir ? heapFlags(heapDir) : {}) },
  });
  let cancelAllSeconds = NaN;
  try {
    const jobs: Awaited<ReturnType<BenchEnv['client']['workflow']['start']>>[] = [];
    const result = await footprint(
      proc.pid!,
      log,
      calls,
      async () => {
        jobs.push(
          ...(await Promise.all(
            Array.from({ length: calls }, () =>
              env.client.workflow.start('job', {
                taskQueue,
                workflowId: env.id('memory'),
                args: [{ tenant: 'bench', steps: [{ call: 'reader.sleep', args: { ms: 600_000 } }] }],
              }),
            ),
          )),
        );
      },
      async () => {
        const t = performance.now();
        await Promise.all(jobs.map((h) => h.cancel()));
        await Promise.all(jobs.map((h) => h.result().catch(() => undefined)));
        cancelAllSeconds = (performance.now() - t) / 1000;
      },
      heapDir,
    );
    return { ...result, cancelAllSeconds };
  } finally {
    for (const w of workers) if (w.exitCode === null) killTree(w.pid!);
  }
}

/**
 * The baseline: a bare worker process (its bundle built here, so no webpack runs in it). Its activity neither
 * heartbeats nor hears a cancel, so its workflows are terminated and the process killed at the end.
 */
async function measureBare(env: BenchEnv, calls: number, heapDir?: string): Promise<Footprint> {
  const taskQueue = 'bare-memory';
  const log = path.join(env.dir, 'memory-bare-received.jsonl');
  const proc = await startBareProcess(env, taskQueue, {
    slots: calls + 100,
    readerEnv: { OZ0_RECEIVED_LOG: log, READER_STATE: path.join(env.dir, 'memory-bare-seen.json') },
    vars: heapDir ? heapFlags(heapDir) : {},
  });
  try {
    const ids: string[] = [];
    return await footprint(
      proc.pid!,
      log,
      calls,
      async () => {
        await Promise.all(
          Array.from({ length: calls }, () => {
            const workflowId = env.id('memory-bare');
            ids.push(workflowId);
            return env.client.workflow.start('bareSleepJob', { taskQueue, workflowId, args: [600_000] });
          }),
        );
      },
      async () => {
        await Promise.all(ids.map((id) => env.client.workflow.getHandle(id).terminate('bench: done')));
      },
      heapDir,
    );
  } finally {
    if (proc.exitCode === null) killTree(proc.pid!);
  }
}

export async function measureMemory(env: BenchEnv, opts: MemoryOptions) {
  const heapDir = opts.heap ? fs.mkdtempSync(path.join(env.dir, 'heap-')) : undefined;
  const bare = await measureBare(env, opts.calls, heapDir);
  const oz0 = await measureOz0(env, opts.calls, heapDir);
  if (oz0.heap && bare.heap) printHeaps(oz0.heap, bare.heap, oz0.runningMiB, bare.runningMiB);
  const sink = await otlpSink();
  const traced = await measureOz0(env, opts.calls, undefined, sink.url).finally(() => sink.close());
  const rows: Row[] = [
    {
      measure: `(f) node peak memory, ${opts.calls} calls at once`,
      figure:
        `${fixed(oz0.peakMiB, 0)} MiB (idle ${fixed(oz0.idleMiB, 0)}, server ${fixed(oz0.serverPeakMiB, 0)} MiB); ` +
        `bare worker ${fixed(bare.peakMiB, 0)} MiB (idle ${fixed(bare.idleMiB, 0)})`,
      target: '≤ bare + 60 MiB',
      met: oz0.peakMiB <= bare.peakMiB + 60,
    },
    {
      measure: `(O5) the same node tracing (spans over OTLP), ${opts.calls} calls at once`,
      figure:
        `${fixed(traced.peakMiB, 0)} MiB (idle ${fixed(traced.idleMiB, 0)}; ${fixed(sink.bytes() / 1024)} KiB of spans); ` +
        `untraced ${fixed(oz0.peakMiB, 0)} MiB`,
      target: '≤ untraced + 60 MiB',
      met: traced.peakMiB <= oz0.peakMiB + 60,
    },
  ];
  return { rows, data: { ...opts, oz0, traced, bare } };
}

/** The two main threads' heaps side by side, by what holds the most in oz0's. */
function printHeaps(oz0: HeapSummary, bare: HeapSummary, oz0Rss: number, bareRss: number): void {
  const bareBy = new Map(bare.by.map((b) => [b.what, b]));
  const lines = [
    `heap with every call running: oz0 main thread ${fixed(oz0.totalMiB, 0)} MiB of ${fixed(oz0Rss, 0)} resident; ` +
      `bare ${fixed(bare.totalMiB, 0)} of ${fixed(bareRss, 0)} (the rest: workflow threads, native memory, code)`,
    `${'what'.padEnd(40)} ${'oz0 MiB'.padStart(8)} ${'count'.padStart(8)} ${'bare MiB'.padStart(9)} ${'count'.padStart(8)}`,
    ...oz0.by.map((o) => {
      const b = bareBy.get(o.what);
      return `${o.what.slice(0, 40).padEnd(40)} ${fixed(o.mib, 1).padStart(8)} ${String(o.count).padStart(8)} ${fixed(b?.mib ?? 0, 1).padStart(9)} ${String(b?.count ?? 0).padStart(8)}`;
    }),
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}
