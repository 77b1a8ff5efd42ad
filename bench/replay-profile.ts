/**
 * The job workflow's CPU a call, without a loaded machine's noise (issue 36.7): a job of sequential echo calls and the
 * bare workflow of as many, recorded once, then replayed many times, each replay's CPU taken. A replay worker runs its
 * workflows in a V8 context on its process's main thread (the SDK's debug mode, the context reused as a node's is), so
 * `node --cpu-prof` of `one` profiles the workflow code a node runs on its workflow thread, and `sum` adds that profile
 * up by the bundle's module (webpack's `./dist/workflows/job.js` …), self and inclusive, and by function.
 */
const USAGE = `node dist/bench/replay-profile.js
  record DIR [CALLS]                   a dev server of its own, a node and the bare worker; writes DIR/oz0.history, bare.history
  replay DIR [ROUNDS [COPIES [BUNDLE…]]]  CPU a call replayed: bare, and oz0's history under each oz0 bundle (default
                                       dist/workflow-bundle.js), each round a process per subject, COPIES replays each
  one DIR oz0|bare BUNDLE [COPIES]     one subject in this process (under node --cpu-prof --cpu-prof-dir=P)
  sum FILE…                            a profile of \`one\` summed by the bundle's module and by function`;

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { temporal } from '@temporalio/proto';
import { DefaultLogger, Runtime, Worker, makeTelemetryFilterString } from '@temporalio/worker';
import type { ReplayWorkerOptions } from '@temporalio/worker';
import { BUNDLE_FILE } from '../worker/bundle';
import { parseConfig } from '../common/config';
import { processDataOf } from '../data';
import { bareBundleCode } from './bare/worker';
import { benchConfig, echoSteps, openBenchEnv, startBareWorker, withNode } from './env';

const History = temporal.api.history.v1.History;

/** A node's data converter with the recorded run's keys (D4); no store: a replay of small calls reads none. */
function sealingConverter(dir: string) {
  const folder = path.join(dir, 'keys');
  return processDataOf({ ...parseConfig({ payloads: { store: 'off', seal: { folder } } }), baseDir: dir })
    .dataConverter;
}

async function record(dir: string, calls: number): Promise<void> {
  fs.mkdirSync(dir, { recursive: true });
  const env = await openBenchEnv();
  try {
    const ids = { oz0: env.id('replay-oz0'), bare: env.id('replay-bare') };
    const config = benchConfig(env, 'oz0-replay', { jobs: { continueAsNewAfterCalls: 10_000 } });
    await withNode(env, config, async () => {
      const handle = await env.client.workflow.start('job', {
        taskQueue: 'oz0-replay',
        workflowId: ids.oz0,
        args: [{ tenant: 'bench', steps: echoSteps(calls) }],
      });
      await handle.result();
    });
    const bare = await startBareWorker(env, 'bare-replay');
    try {
      await env.client.workflow.execute('bareJob', { taskQueue: bare.taskQueue, workflowId: ids.bare, args: [calls] });
    } finally {
      await bare.close();
    }
    for (const [name, id] of Object.entries(ids)) {
      const history = await env.client.workflow.getHandle(id).fetchHistory();
      fs.writeFileSync(path.join(dir, `${name}.history`), History.encode(History.fromObject(history)).finish());
      fs.writeFileSync(path.join(dir, `${name}.id`), id);
    }
    fs.writeFileSync(path.join(dir, 'calls'), String(calls));
    // The keys that sealed oz0's history (D4): a replay opens it as a node does.
    fs.cpSync(env.keys, path.join(dir, 'keys'), { recursive: true });
    process.stdout.write(`recorded ${calls} calls of each into ${dir}\n`);
  } finally {
    await env.close();
  }
}

interface Subject {
  name: string;
  history: temporal.api.history.v1.IHistory;
  workflowId: string;
  options: ReplayWorkerOptions;
}

/**
 * CPU (user + system) of each replay after the first of `copies` replays of a history by one replay worker, in µs: the
 * first carries the worker's start and its bundle's evaluation in a fresh V8 context, which is not a call's cost.
 */
async function replayOnce(s: Subject, copies: number): Promise<number[]> {
  const histories = Array.from({ length: copies }, () => ({ history: s.history, workflowId: s.workflowId }));
  const out: number[] = [];
  let last: NodeJS.CpuUsage | undefined;
  for await (const r of Worker.runReplayHistories(s.options, histories)) {
    if (r.error) throw r.error;
    const now = process.cpuUsage();
    if (last) out.push(now.user - last.user + now.system - last.system);
    last = now;
  }
  return out;
}

/**
 * One subject's replays in this process (`one`): a warm-up worker (the bundle's first evaluation, V8's optimisation),
 * then one worker replaying `copies`; prints the CPU a call of each measured replay, as JSON.
 */
async function replayOne(dir: string, name: string, bundle: string, copies: number): Promise<void> {
  Runtime.install({
    logger: new DefaultLogger('ERROR'),
    telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }), forward: {} } },
  });
  const calls = Number(fs.readFileSync(path.join(dir, 'calls'), 'utf8'));
  // The traced bundle's `exporter` sink, doing nothing (a replay never calls it): without it the worker logs an error
  // for each span the replay ends, main-thread work a live node does not do. Not tracing's own sinks
  // (worker/telemetry.ts), which would turn on async hooks here.
  const sinks = { exporter: { export: { fn: () => undefined, callDuringReplay: false } } };
  const s: Subject = {
    name,
    history: History.decode(fs.readFileSync(path.join(dir, `${name}.history`))),
    workflowId: fs.readFileSync(path.join(dir, `${name}.id`), 'utf8'),
    options: {
      workflowBundle: { codePath: bundle },
      sinks,
      ...(name === 'bare' ? {} : { dataConverter: sealingConverter(dir) }),
    },
  };
  await replayOnce(s, 2);
  const perCall = (await replayOnce(s, copies)).map((us) => us / calls);
  process.stdout.write(`${JSON.stringify(perCall)}\n`);
}

/**
 * `replay`: bare's history with bare's bundle, and oz0's with each oz0 bundle given (default the build's), each round a
 * process of its own per subject, in an order that turns each round. Separate processes: a workflow that runs a
 * CancellationScope turns on Node's async hooks for its whole thread (the scope's AsyncLocalStorage), and every promise
 * after it, any workflow's, pays for them.
 */
async function replay(dir: string, rounds: number, copies: number, bundles: string[]): Promise<void> {
  const bareBundle = path.join(dir, 'bare-bundle.js');
  if (!fs.existsSync(bareBundle)) fs.writeFileSync(bareBundle, await bareBundleCode());
  const subjects = [
    { label: 'bare', name: 'bare', bundle: bareBundle },
    ...bundles.map((b) => ({ label: `oz0 ${path.basename(b)}`, name: 'oz0', bundle: path.resolve(b) })),
  ];
  const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
  const cpu = new Map<string, number[]>(subjects.map((s) => [s.label, []]));
  /** Each round's median over bare's in the same round: the machine's drift between rounds cancels out. */
  const over = new Map<string, number[]>(subjects.map((s) => [s.label, []]));
  for (let r = 0; r < rounds; r++) {
    const order = subjects.map((_, i) => subjects[(i + r) % subjects.length]);
    const round = new Map<string, number>();
    for (const s of order) {
      const out = execFileSync(process.execPath, [__filename, 'one', dir, s.name, s.bundle, String(copies)], {
        encoding: 'utf8',
      });
      const v = JSON.parse(out) as number[];
      cpu.get(s.label)!.push(...v);
      round.set(s.label, median(v));
    }
    for (const s of subjects) over.get(s.label)!.push(round.get(s.label)! - round.get('bare')!);
  }
  const bare = median(cpu.get('bare')!);
  for (const s of subjects) {
    const v = cpu.get(s.label)!;
    const m = median(v);
    const paired = over.get(s.label)!;
    process.stdout.write(
      `${s.label.padEnd(28)} µs of CPU a call replayed: median ${m.toFixed(1)} (${(m - bare).toFixed(1)} over bare; ` +
        `paired by round ${median(paired).toFixed(1)}, from ${Math.min(...paired).toFixed(0)} to ${Math.max(...paired).toFixed(0)}), ` +
        `min ${Math.min(...v).toFixed(1)}, max ${Math.max(...v).toFixed(1)}, ${v.length} replays\n`,
    );
  }
}

/**
 * A replay profile summed by where its time went: frames in a workflow bundle (a file named `*bundle*.js`) by the
 * webpack module their line is in (its `/***\/ "./dist/workflows/job.js"` headers), self and inclusive; every other
 * frame by its package or file.
 */
function sum(files: string[]): void {
  interface Node {
    id: number;
    callFrame: { functionName: string; url: string; lineNumber: number };
    children?: number[];
  }
  const bundles = new Map<string, ((line: number) => string) | null>();
  const bundleOf = (url: string) => {
    if (!bundles.has(url)) {
      const file = url.replace(/^file:\/\//, '');
      bundles.set(url, /bundle[^/]*\.js$/.test(file) && fs.existsSync(file) ? bundleModules(file) : null);
    }
    return bundles.get(url);
  };
  for (const file of files) {
    const p = JSON.parse(fs.readFileSync(file, 'utf8')) as { nodes: Node[]; samples: number[]; timeDeltas: number[] };
    const byId = new Map(p.nodes.map((n) => [n.id, n]));
    const parent = new Map<number, number>();
    for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
    const where = (n: Node): string => {
      const { url, lineNumber, functionName } = n.callFrame;
      if (!url) return functionName.startsWith('(') ? functionName : '(native)';
      const inBundle = bundleOf(url);
      if (inBundle) return `${path.basename(url)} ${inBundle(lineNumber)}`;
      const m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(url);
      return m ? m[1] : url.replace(/^.*\/dist\//, 'oz0 ');
    };
    const self = new Map<string, number>();
    const incl = new Map<string, number>();
    const fns = new Map<string, number>();
    const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
    let total = 0;
    p.samples.forEach((id, i) => {
      const ms = (p.timeDeltas[i] ?? 0) / 1000;
      const n = byId.get(id)!;
      if (n.callFrame.functionName === '(idle)') return;
      total += ms;
      const w = where(n);
      add(self, w, ms);
      add(fns, `${n.callFrame.functionName || '(anonymous)'} [${w}:${n.callFrame.lineNumber + 1}]`, ms);
      const seen = new Set<string>();
      for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) seen.add(where(byId.get(at)!));
      for (const m of seen) add(incl, m, ms);
    });
    const top = (m: Map<string, number>, k: number) =>
      [...m]
        .sort((a, b) => b[1] - a[1])
        .slice(0, k)
        .map(([w, ms]) => `    ${ms.toFixed(1).padStart(9)} ms  ${w}`)
        .join('\n');
    process.stdout.write(
      `${file}: ${total.toFixed(0)} ms busy\n  self by module\n${top(self, 40)}\n  inclusive by module\n${top(incl, 40)}\n  self by function\n${top(fns, 60)}\n`,
    );
  }
}

/** The webpack module each line of a bundle belongs to. */
function bundleModules(file: string): (line: number) => string {
  const at: string[] = [];
  let current = '(bundle)';
  for (const line of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = /^\/\*\*\*\/ "([^"]+)"/.exec(line);
    if (m) current = m[1].replace(/^.*node_modules\//, '').replace(/^\.\/dist\//, '');
    at.push(current);
  }
  return (line) => at[line] ?? '(bundle)';
}

if (require.main === module) {
  const [what, dir, ...rest] = process.argv.slice(2);
  const run =
    what === 'record'
      ? record(dir, Number(rest[0] ?? 200))
      : what === 'replay'
        ? replay(dir, Number(rest[0] ?? 5), Number(rest[1] ?? 5), rest.length > 2 ? rest.slice(2) : [BUNDLE_FILE])
        : what === 'one'
          ? replayOne(dir, rest[0], rest[1], Number(rest[2] ?? 5))
          : what === 'sum'
            ? Promise.resolve(sum(process.argv.slice(3)))
            : Promise.reject(new Error(`usage: ${USAGE}`));
  run.then(
    () => process.exit(0),
    (err: unknown) => {
      process.stderr.write(`${String(err instanceof Error ? err.stack : err)}\n`);
      process.exit(1);
    },
  );
}
