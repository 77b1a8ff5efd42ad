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
import { readSplit, snapshotThreads, splitMemory, summarizeHeap } from '../heap';
import { otlpSink } from './observability';
import type { HeapSummary, MemorySplit } from '../heap';

export interface MemoryOptions {
  calls: number;
  /** Heap snapshots of every thread of both workers with every call running; their peaks are then not a figure. */
  heap?: boolean;
  /** Issue 36.3: both workers' resident memory split (mappings, V8 heaps by thread and space) with every call running. */
  split?: boolean;
}

/** A worker's environment with bench/mem-probe.ts preloaded into each of its threads, writing into `dir`. */
function probeEnv(dir: string): Record<string, string> {
  const probe = path.join(__dirname, '..', 'mem-probe.js');
  return { NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require ${probe}`.trim(), OZ0_MEM_PROBE: dir };
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

/** bench/mem-probe.ts in a worker: the folder it writes into (none: not probed), and whether to snapshot its heaps. */
interface Probe {
  dir?: string;
  heap: boolean;
}

interface Footprint {
  /** Each thread's V8 heap summed by constructor, with every call running (--heap), the main thread first. */
  heaps?: HeapSummary[];
  /** Where its resident memory is, with every call running (--split). */
  split?: MemorySplit;
  /** The same at the largest resident size sampled as the calls end. */
  peakSplit?: MemorySplit;
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
  probeDir?: string,
  heap = false,
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
    const split = probeDir ? await splitMemory(pid, probeDir) : undefined;
    const heaps = probeDir && heap ? (await snapshotThreads(pid, probeDir)).map((f) => summarizeHeap(f)) : undefined;
    // The peak comes as the calls end: with the probe, the split at the largest resident size seen on the way.
    let peakSplit: MemorySplit | undefined;
    const peakSampler = probeDir
      ? setInterval(() => {
          try {
            const now = readSplit(pid, probeDir);
            if (!peakSplit || now.rssMiB > peakSplit.rssMiB) peakSplit = now;
          } catch {
            // A file half gone as a thread ends; the next sample reads it.
          }
        }, 100)
      : undefined;
    await end();
    await sleep(500);
    clearInterval(peakSampler);
    const peakMiB = statusMiB(pid, 'VmHWM') ?? NaN;
    return {
      ...(peakSplit ? { peakSplit } : {}),
      idleMiB,
      runningMiB,
      peakMiB,
      serverPeakMiB,
      allRunningSeconds,
      ...(split ? { split } : {}),
      ...(heaps ? { heaps } : {}),
    };
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
  probe: Probe,
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
    env: { ...traced, ...(probe.dir ? probeEnv(probe.dir) : {}) },
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
      probe.dir,
      probe.heap,
    );
    return { ...result, cancelAllSeconds };
  } finally {
    for (const w of workers) if (w.exitCode === null) killTree(w.pid!);
  }
}

/**
 * The baseline: a bare worker process (its bundle built here, so no webpack runs in it). Its jobs end as oz0's do, by
 * a cancel each (the peak comes as they end: each side pays for its 500 cancels' workflow tasks and pushed activity
 * cancels); its activity does not stop its MCP call on one, so the process is killed at the end.
 */
async function measureBare(env: BenchEnv, calls: number, probe: Probe): Promise<Footprint> {
  const taskQueue = 'bare-memory';
  const log = path.join(env.dir, 'memory-bare-received.jsonl');
  const proc = await startBareProcess(env, taskQueue, {
    slots: calls + 100,
    readerEnv: { OZ0_RECEIVED_LOG: log, READER_STATE: path.join(env.dir, 'memory-bare-seen.json') },
    vars: probe.dir ? probeEnv(probe.dir) : {},
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
        const handles = ids.map((id) => env.client.workflow.getHandle(id));
        await Promise.all(handles.map((h) => h.cancel()));
        await Promise.all(handles.map((h) => h.result().catch(() => undefined)));
      },
      probe.dir,
      probe.heap,
    );
  } finally {
    if (proc.exitCode === null) killTree(proc.pid!);
  }
}

export async function measureMemory(env: BenchEnv, opts: MemoryOptions) {
  const probe = (): Probe =>
    opts.heap || opts.split
      ? { dir: fs.mkdtempSync(path.join(env.dir, 'probe-')), heap: !!opts.heap }
      : { heap: false };
  const bare = await measureBare(env, opts.calls, probe());
  const oz0 = await measureOz0(env, opts.calls, probe());
  if (oz0.split && bare.split) printSplit('with every call running', oz0.split, bare.split);
  if (oz0.peakSplit && bare.peakSplit)
    printSplit('at the largest sampled as the calls end', oz0.peakSplit, bare.peakSplit);
  if (oz0.heaps && bare.heaps) printHeaps(oz0.heaps, bare.heaps);
  const sink = await otlpSink();
  const traced = await measureOz0(env, opts.calls, { heap: false }, sink.url).finally(() => sink.close());
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

function sum(modules: MemorySplit['modules'] | undefined): number {
  return (modules ?? []).reduce((n, m) => n + m.kb, 0);
}

function names(s: MemorySplit): string {
  return Object.entries(s.mapped.threadNames ?? {})
    .map(([n, c]) => `${n}×${c}`)
    .join(' ');
}

/** Where each worker's resident memory is with every call running, oz0's beside bare's (issue 36.3). */
function printSplit(when: string, oz0: MemorySplit, bare: MemorySplit): void {
  const row = (what: string, a: number, b: number) =>
    `${what.padEnd(44)} ${fixed(a, 1).padStart(8)} ${fixed(b, 1).padStart(8)} ${fixed(a - b, 1).padStart(8)}`;
  const heapOf = (s: MemorySplit, i: number, k: 'usedMiB' | 'committedMiB') => s.threads[i]?.[k] ?? 0;
  const lines = [
    `${`${when} (MiB)`.padEnd(44)} ${'oz0'.padStart(8)} ${'bare'.padStart(8)} ${'oz0−bare'.padStart(8)}`,
    row('resident (smaps)', oz0.rssMiB, bare.rssMiB),
    row('  node binary (code, data)', oz0.mapped.nodeBinary, bare.mapped.nodeBinary),
    row('  Temporal core .node', oz0.mapped.temporalCore, bare.mapped.temporalCore),
    row('  other files', oz0.mapped.otherFiles, bare.mapped.otherFiles),
    row('  malloc: main arena [heap]', oz0.mapped.mallocMain, bare.mapped.mallocMain),
    row(
      `  malloc: thread arenas (${oz0.mapped.arenas} / ${bare.mapped.arenas})`,
      oz0.mapped.mallocArenas,
      bare.mapped.mallocArenas,
    ),
    row('  other anonymous (V8 heaps, stacks, mmaps)', oz0.mapped.otherAnon, bare.mapped.otherAnon),
    row('V8 main thread: committed', heapOf(oz0, 0, 'committedMiB'), heapOf(bare, 0, 'committedMiB')),
    row('V8 main thread: used', heapOf(oz0, 0, 'usedMiB'), heapOf(bare, 0, 'usedMiB')),
    row('V8 workflow thread: committed', heapOf(oz0, 1, 'committedMiB'), heapOf(bare, 1, 'committedMiB')),
    row('V8 workflow thread: used', heapOf(oz0, 1, 'usedMiB'), heapOf(bare, 1, 'usedMiB')),
    row('external (of which array buffers)', oz0.externalMiB, bare.externalMiB),
    row('  array buffers', oz0.arrayBuffersMiB, bare.arrayBuffersMiB),
    row('threads (count)', oz0.mapped.threads, bare.mapped.threads),
    row('JS threads (count)', oz0.threads.length, bare.threads.length),
    `threads by name: oz0 ${names(oz0)}; bare ${names(bare)}`,
    `modules' source on the main thread (KiB): oz0 ${sum(oz0.modules)}, bare ${sum(bare.modules)}; oz0's largest: ` +
      (oz0.modules ?? [])
        .slice(0, 12)
        .map((m) => `${m.what} ${m.kb}`)
        .join(', '),
  ];
  for (const [i, t] of oz0.threads.entries()) {
    lines.push(`by space, thread ${t.threadId} (oz0 used/committed, bare used/committed):`);
    for (const sp of t.spaces) {
      const b = bare.threads[i]?.spaces.find((x) => x.name === sp.name);
      lines.push(
        `  ${sp.name.padEnd(28)} ${fixed(sp.usedMiB, 1).padStart(7)} / ${fixed(sp.committedMiB, 1).padStart(7)}   ` +
          `${fixed(b?.usedMiB ?? 0, 1).padStart(7)} / ${fixed(b?.committedMiB ?? 0, 1).padStart(7)}`,
      );
    }
  }
  process.stdout.write(`${lines.join('\n')}\n`);
}

/** Each thread's heap, oz0's beside bare's, by what holds the most in oz0's. */
function printHeaps(oz0: HeapSummary[], bare: HeapSummary[]): void {
  for (const [i, o] of oz0.entries()) {
    const b = bare[i];
    if (b) printHeap(i === 0 ? 'main thread' : `thread ${i}`, o, b);
  }
}

function printHeap(thread: string, oz0: HeapSummary, bare: HeapSummary): void {
  const bareBy = new Map(bare.by.map((b) => [b.what, b]));
  const lines = [
    `${thread}'s heap with every call running: oz0 ${fixed(oz0.totalMiB, 1)} MiB live, bare ${fixed(bare.totalMiB, 1)}`,
    `${'what'.padEnd(40)} ${'oz0 MiB'.padStart(8)} ${'count'.padStart(8)} ${'bare MiB'.padStart(9)} ${'count'.padStart(8)}`,
    ...oz0.by.map((o) => {
      const b = bareBy.get(o.what);
      return `${o.what.slice(0, 40).padEnd(40)} ${fixed(o.mib, 1).padStart(8)} ${String(o.count).padStart(8)} ${fixed(b?.mib ?? 0, 1).padStart(9)} ${String(b?.count ?? 0).padStart(8)}`;
    }),
  ];
  process.stdout.write(`${lines.join('\n')}\n`);
}
