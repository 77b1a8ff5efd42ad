/**
 * O5: what metrics and tracing cost a call. Two `oz0 worker` processes on one dev server, the same config but their
 * own task queues: one with both on (`OZ0_METRICS_PORT`, scraped every second as Prometheus would, and
 * `OTEL_EXPORTER_OTLP_ENDPOINT` to an OTLP/HTTP endpoint of this run that takes every export and drops it), one with
 * both off. Jobs of sequential echo calls alternate between them, round by round, so both see the same machine.
 * Processes, not nodes in this one: tracing is once per process. Beside each call's time, each worker's CPU per
 * call (every thread of its process, from /proc), steadier than wall time on a shared machine; with `cpuProf`, both
 * run under `--cpu-prof` and their profiles are summed (bench/cpu-profile.ts), after a clean stop that writes them.
 */
import type { ChildProcess } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import fs from 'node:fs';
import path from 'node:path';
import { killTree, startWorker } from '../../worker/processes';
import { freePort } from '../../worker/dev-server';
import { busiestNodeThread, cpuSeconds, fixed, mean, resultsDir, threadCpu } from '../common';
import type { ThreadCpu } from '../common';
import type { Row } from '../common';
import { profilesIn, summarizeProfile } from '../cpu-profile';
import type { ProfileSummary } from '../cpu-profile';
import { summarizeHeapProfile } from '../heap-profile';
import { GC_TRACE_FLAGS, summarizeGcTrace } from '../gc-trace';
import { echoSteps, startBareProcess, writeBenchConfig } from '../env';
import type { BenchEnv } from '../env';

export interface ObservabilityOptions {
  calls: number;
  rounds: number;
  /** Run the workers under `--cpu-prof` and sum their profiles. */
  cpuProf?: boolean;
  /** Sample every allocation of each worker's main thread over the measured rounds (bench/heap-sampler.ts). */
  heapProf?: boolean;
  /** Two more workers, one with metrics only and one with tracing only: what each costs apart. */
  parts?: boolean;
  /**
   * One more process: the bare worker (bare/worker.ts) making the same calls in one-activity-a-call workflows, so an
   * untraced node's CPU per call reads against the baseline's (issue 36.7), both as processes of their own.
   */
  bare?: boolean;
  /**
   * Each worker's collections as V8 traces them (`--trace-gc`, bench/gc-trace.ts), kept in bench/results/gc-trace-…/:
   * why each full collection ran, how often the young generation filled, its size.
   */
  gcTrace?: boolean;
  /**
   * One more untraced node started with these node flags (e.g. `--min-semi-space-size=16`), its rounds alternating
   * with the others': what a flag does to a call's CPU, read against the untraced node's in the same run.
   */
  tryFlags?: string[];
}

/** An OTLP/HTTP endpoint that accepts every export (200) and keeps nothing but a count of its bytes. */
export async function otlpSink(): Promise<{ url: string; bytes: () => number; close(): Promise<void> }> {
  let bytes = 0;
  const server = http.createServer((req, res) => {
    req.on('data', (c: Buffer) => (bytes += c.length));
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    bytes: () => bytes,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

type Variant = 'on' | 'off' | 'metrics' | 'traces' | 'bare' | 'try';

export async function measureObservability(env: BenchEnv, opts: ObservabilityOptions) {
  const sink = await otlpSink();
  const variants: Variant[] = [
    'on',
    'off',
    ...(opts.parts ? (['metrics', 'traces'] as const) : []),
    ...(opts.bare ? (['bare'] as const) : []),
    ...(opts.tryFlags?.length ? (['try'] as const) : []),
  ];
  const workers: ChildProcess[] = [];
  const exits: Array<Promise<number | null>> = [];
  const ports: number[] = [];
  const nodes = {} as Record<Variant, { queue: string; pid: number; spawned: number }>;
  const perCall = Object.fromEntries(variants.map((v) => [v, [] as number[]])) as Record<Variant, number[]>;
  const cpuPerCall = Object.fromEntries(variants.map((v) => [v, [] as number[]])) as Record<Variant, number[]>;
  const threads = Object.fromEntries(variants.map((v) => [v, { main: 0, core: 0, workflow: 0, other: 0 }])) as Record<
    Variant,
    ThreadCpu
  >;
  let measuredFrom = 0;
  const profDir = opts.cpuProf ? path.join(resultsDir(), `cpu-prof-${Date.now()}`) : undefined;
  const heapDir = opts.heapProf ? path.join(resultsDir(), `heap-prof-${Date.now()}`) : undefined;
  if (heapDir) fs.mkdirSync(heapDir, { recursive: true });
  const heapFile = (v: Variant) => path.join(heapDir!, `${v}.heapprofile`);
  const gcDir = opts.gcTrace ? path.join(resultsDir(), `gc-trace-${Date.now()}`) : undefined;
  const gcFile = (v: Variant) => path.join(gcDir!, `${v}.log`);
  let scrapes = 0;
  let scraper: NodeJS.Timeout | undefined;
  try {
    for (const name of variants) {
      const taskQueue = `oz0-obs-${name}`;
      const nodeFlags = [
        ...(profDir ? ['--cpu-prof', `--cpu-prof-dir=${path.join(profDir, name)}`] : []),
        ...(heapDir ? ['--require', path.join(env.root, 'dist', 'bench', 'heap-sampler.js')] : []),
        ...(gcDir ? GC_TRACE_FLAGS : []),
        ...(name === 'try' ? opts.tryFlags! : []),
      ];
      const logFile = gcDir ? gcFile(name) : undefined;
      const heapVars: Record<string, string> = heapDir ? { OZ0_HEAP_PROF_FILE: heapFile(name) } : {};
      if (name === 'bare') {
        const spawned = performance.now();
        const proc = await startBareProcess(env, taskQueue, { slots: 100, nodeFlags, vars: heapVars, logFile });
        workers.push(proc);
        exits.push(new Promise((resolve) => proc.once('exit', resolve)));
        nodes[name] = { queue: taskQueue, pid: proc.pid!, spawned };
        continue;
      }
      const file = writeBenchConfig(env, taskQueue, { jobs: { continueAsNewAfterCalls: 10_000 } });
      const extra: Record<string, string> = { ...heapVars };
      if (name === 'on' || name === 'metrics') {
        const port = await freePort();
        ports.push(port);
        extra.OZ0_METRICS_PORT = String(port);
      }
      if (name === 'on' || name === 'traces') {
        extra.OTEL_EXPORTER_OTLP_ENDPOINT = sink.url;
        extra.OTEL_EXPORTER_OTLP_PROTOCOL = 'http/protobuf';
      }
      const spawned = performance.now();
      const { proc, exited } = await startWorker(file, `bench-obs-${name}`, workers, {
        env: { OZ0_LOG_LEVEL: 'warn', ...extra },
        nodeFlags,
        logFile,
      });
      nodes[name] = { queue: taskQueue, pid: proc.pid!, spawned };
      exits.push(exited);
    }
    scraper = setInterval(() => {
      for (const port of ports) {
        fetch(`http://127.0.0.1:${port}/metrics`)
          .then((r) => r.text())
          .then(() => scrapes++)
          .catch(() => undefined);
      }
    }, 1000);
    const steps = echoSteps(opts.calls);
    const job = async (taskQueue: string, n: number) =>
      taskQueue === nodes.bare?.queue
        ? env.client.workflow.execute('bareJob', { taskQueue, workflowId: env.id('obs-bare'), args: [n] })
        : (
            await env.client.workflow.start('job', {
              taskQueue,
              workflowId: env.id(`obs-${taskQueue}`),
              args: [{ tenant: 'bench', steps: steps.slice(0, n) }],
            })
          ).result();
    // Warm them all: bundles, server processes, the SDK's exporter.
    for (const name of variants) await job(nodes[name].queue, 10);
    const workflowTid = Object.fromEntries(variants.map((v) => [v, busiestNodeThread(nodes[v].pid)]));
    measuredFrom = performance.now();
    if (heapDir) for (const name of variants) process.kill(nodes[name].pid, 'SIGWINCH');
    for (let r = 0; r < opts.rounds; r++) {
      // Rotating which goes first, so none always runs on a machine another just warmed.
      const order = variants.map((_, i) => variants[(i + r) % variants.length]);
      if (r % 2 === 1) order.reverse();
      for (const name of order) {
        const { queue, pid } = nodes[name];
        const t = performance.now();
        const cpu = cpuSeconds(pid);
        const before = threadCpu(pid, workflowTid[name]);
        await job(queue, opts.calls);
        perCall[name].push((performance.now() - t) / opts.calls);
        cpuPerCall[name].push(((cpuSeconds(pid) - cpu) * 1000) / opts.calls);
        const after = threadCpu(pid, workflowTid[name]);
        for (const k of Object.keys(before) as Array<keyof ThreadCpu>) threads[name][k] += after[k] - before[k];
      }
    }
    if (profDir || heapDir || gcDir) {
      // A clean stop (the node drains, then exits) is what makes V8 write the profiles.
      for (const w of workers) w.kill('SIGTERM');
      await Promise.race([Promise.all(exits), new Promise((r) => setTimeout(r, 30_000))]);
    }
  } finally {
    clearInterval(scraper);
    for (const w of workers) if (w.pid) killTree(w.pid);
    await sink.close();
  }
  const ms = (v: Variant) => mean(perCall[v]);
  const cpu = (v: Variant) => mean(cpuPerCall[v]);
  // ms per call by thread kind, over every measured round.
  const split = (v: Variant) =>
    Object.entries(threads[v])
      .map(([k, s]) => `${k} ${fixed((s * 1000) / (opts.calls * opts.rounds), 2)}`)
      .join(', ');
  const ratio = ms('on') / ms('off');
  if (gcDir) gcRows(variants, gcFile, (v) => measuredFrom - nodes[v].spawned, opts.calls * opts.rounds);
  const profiles = profDir
    ? profileRows(
        profDir,
        Object.fromEntries(variants.map((v) => [v, measuredFrom - nodes[v].spawned])) as Record<Variant, number>,
      )
    : undefined;
  const rows: Row[] = [
    {
      measure: '(O5) one call: metrics and tracing on / both off',
      figure: `${fixed(ratio, 3)} (${fixed(ms('on'), 2)} / ${fixed(ms('off'), 2)} ms; ${scrapes} scrapes, ${fixed(sink.bytes() / 1024)} KiB of spans)`,
      target: '≤ 1.03',
      met: ratio <= 1.03,
    },
    ...variants
      .filter((v) => v !== 'off' && v !== 'bare')
      .map((v) => ({
        measure: `(O5) the node's CPU per call: ${v === 'on' ? 'both' : v === 'try' ? opts.tryFlags!.join(' ') : `${v} only`} / off`,
        figure: `${fixed(cpu(v) / cpu('off'), 3)} (${fixed(cpu(v), 2)} / ${fixed(cpu('off'), 2)} ms${v === 'on' ? '' : `; a call ${fixed(ms(v) / ms('off'), 3)} ×`}), for the record`,
      })),
    ...(opts.bare
      ? [
          {
            measure: "(36.7) the untraced node's CPU per call / the bare worker's",
            figure: `${fixed(cpu('off') / cpu('bare'), 3)} (${fixed(cpu('off'), 2)} / ${fixed(cpu('bare'), 2)} ms; a call ${fixed(ms('off') / ms('bare'), 3)} ×), for the record`,
          },
        ]
      : []),
    ...(heapDir
      ? variants
          .filter((v) => fs.existsSync(heapFile(v)) || fs.existsSync(`${heapFile(v)}.gc.json`))
          .map((v) => ({
            measure: `(36.7) bytes allocated per call on the main thread, ${v}`,
            figure: `${fixed(heapRows(v, heapFile(v), opts.calls * opts.rounds) / 1024, 1)} KiB, for the record`,
          }))
      : []),
    ...variants.map((v) => ({
      measure: `(O5) the node's CPU per call by thread, ${v}`,
      figure: `${split(v)} ms`,
    })),
  ];
  return {
    rows,
    data: {
      ...opts,
      msPerCall: perCall,
      cpuMsPerCall: cpuPerCall,
      threadSeconds: threads,
      on: ms('on'),
      off: ms('off'),
      ratio,
      scrapes,
      spanBytes: sink.bytes(),
      ...(profiles ? { profiles } : {}),
    },
  };
}

/**
 * Each worker's collections over the measured rounds from its `--trace-gc` log (`fromMs`: when they began, on its own
 * clock), printed: a call's share of each kind, and the young generation's size.
 */
function gcRows(variants: Variant[], file: (v: Variant) => string, fromMs: (v: Variant) => number, calls: number) {
  for (const v of variants) {
    if (!fs.existsSync(file(v))) continue;
    const s = summarizeGcTrace(file(v), fromMs(v));
    const { min, max, last } = s.newSpaceKiB;
    process.stderr.write(`${v}: ${file(v)}: young generation ${min}–${max} KiB committed (${last} at the end)\n`);
    for (const k of s.kinds) {
      const each = `${fixed(calls / k.count, 1)} calls`;
      process.stderr.write(
        `  ${String(k.count).padStart(5)} × ${k.what}: one every ${each}, ${fixed((k.ms * 1000) / calls, 0)} µs a call\n`,
      );
    }
    for (const r of s.reducer) process.stderr.write(`  memory reducer: ${r.what} × ${r.count}\n`);
  }
}

/** A worker's allocation profile over the measured rounds, printed by module and function in bytes a call; the total. */
function heapRows(name: string, file: string, calls: number): number {
  const s = fs.existsSync(file)
    ? summarizeHeapProfile(file, 25)
    : { bytes: 0, modules: [], inclusive: [], functions: [], ours: [] };
  const kib = (b: number) => fixed(b / calls / 1024, 1).padStart(8);
  process.stderr.write(`${name}: ${path.basename(file)}, ${kib(s.bytes)} KiB allocated a call\n`);
  if (fs.existsSync(`${file}.gc.json`)) {
    const { spaces, ...gc } = JSON.parse(fs.readFileSync(`${file}.gc.json`, 'utf8')) as Record<
      string,
      { count: number; ms: number }
    > & { spaces: Record<string, number> };
    const each = Object.entries(gc).map(
      ([k, g]) => `${k} ${fixed(g.count / calls, 3)} × ${fixed((g.ms * 1000) / calls, 0)} µs`,
    );
    process.stderr.write(`  collections a call: ${each.join(', ')}\n`);
    const mib = (b: number | undefined) => fixed((b ?? 0) / 2 ** 20, 1);
    process.stderr.write(`  at exit: new space ${mib(spaces.new_space)} MiB, old space ${mib(spaces.old_space)} MiB\n`);
  }
  for (const [title, list] of [
    ['self by module', s.modules.slice(0, 10)],
    ['inclusive by module', s.inclusive.slice(0, 10)],
    ['self by function', s.functions.slice(0, 20)],
    ["by oz0's innermost frame on the stack", s.ours.slice(0, 12)],
  ] as const) {
    process.stderr.write(`  ${title}, KiB a call\n`);
    for (const r of list) process.stderr.write(`  ${kib(r.bytes)}  ${r.what}\n`);
  }
  return s.bytes / calls;
}

/**
 * Each worker's profiles (one per thread) from the measured rounds on (`fromMs` after each one's start), summed and
 * printed: what the traced node spends its time on.
 */
function profileRows(dir: string, fromMs: Partial<Record<Variant, number>>): Record<string, ProfileSummary[]> {
  const out: Record<string, ProfileSummary[]> = {};
  for (const [name, from] of Object.entries(fromMs)) {
    out[name] = profilesIn(path.join(dir, name)).map((f) => summarizeProfile(f, 25, from));
    for (const s of out[name]) {
      process.stderr.write(
        `${name}: ${path.basename(s.file)}, ${fixed(s.busyMs, 0)} ms busy of ${fixed(s.totalMs, 0)}\n`,
      );
      for (const m of s.modules.slice(0, 12)) process.stderr.write(`  ${fixed(m.ms).padStart(8)} ms  ${m.what}\n`);
    }
  }
  if (!fs.existsSync(dir)) process.stderr.write(`observability: no profiles in ${dir}\n`);
  return out;
}
