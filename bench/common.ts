/**
 * What every benchmark shares: the machine it ran on, percentiles, a bounded wait, a table for the terminal
 * and a JSON file in bench/results/.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { z } from 'zod';
import { projectRoot } from '../common/paths';
import { readReceived } from '../examples/common';
import type { Client } from '@temporalio/client';

/** The machine a figure came from, so a number is never quoted without it. */
export interface Machine {
  cpus: number;
  cpu: string;
  memGiB: number;
  node: string;
  platform: string;
  temporalCli?: string;
  commit?: string;
}

export function machine(cli?: string): Machine {
  const quiet = (cmd: string, args: string[]) => {
    try {
      return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim();
    } catch {
      return undefined;
    }
  };
  return {
    cpus: os.cpus().length,
    cpu: os.cpus()[0]?.model.trim() ?? 'unknown',
    memGiB: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
    temporalCli: cli ? quiet(cli, ['--version'])?.split('\n')[0] : undefined,
    commit: quiet('git', ['-C', projectRoot(), 'rev-parse', '--short', 'HEAD']),
  };
}

export function percentile(values: number[], p: number): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

export function mean(values: number[]): number {
  return values.reduce((a, b) => a + b, 0) / values.length;
}

export interface Spread {
  n: number;
  p50: number;
  p99: number;
  max: number;
  mean: number;
}

/** Each series of a record as its spread, under the same keys. */
export function spreads<K extends string>(series: Record<K, number[]>): Record<K, Spread> {
  return Object.fromEntries(Object.entries<number[]>(series).map(([k, v]) => [k, spread(v)])) as Record<K, Spread>;
}

export function spread(values: number[]): Spread {
  const round = (v: number) => Math.round(v * 10) / 10;
  return {
    n: values.length,
    p50: round(percentile(values, 50)),
    p99: round(percentile(values, 99)),
    max: round(Math.max(...values)),
    mean: round(mean(values)),
  };
}

/**
 * Polls `check` every `everyMs` (5 ms) until it gives a value; throws after `timeoutMs`, naming what it waited for. A
 * check that reads a growing file polls less often, so as not to take the measured node's CPU.
 */
export async function until<T>(what: string, check: () => T | undefined, timeoutMs: number, everyMs = 5): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`bench: timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** One line of the summary table: a measure, its figure, and the target it is held to (if any). */
export interface Row {
  measure: string;
  figure: string;
  target?: string;
  /** Whether the target was met; undefined where there is no target. */
  met?: boolean;
}

export function table(rows: Row[]): string {
  const cols = [
    ['measure', ...rows.map((r) => r.measure)],
    ['figure', ...rows.map((r) => r.figure)],
    ['target', ...rows.map((r) => r.target ?? '')],
    ['', ...rows.map((r) => (r.met === undefined ? '' : r.met ? 'met' : 'MISSED'))],
  ];
  const widths = cols.map((c) => Math.max(...c.map((s) => s.length)));
  const lines: string[] = [];
  for (let i = 0; i <= rows.length; i++) {
    lines.push(
      cols
        .map((c, j) => c[i].padEnd(widths[j]))
        .join('  ')
        .trimEnd(),
    );
    if (i === 0) lines.push(widths.map((w) => '-'.repeat(w)).join('  '));
  }
  return `${lines.join('\n')}\n`;
}

/** Writes `bench/results/<name>-<when>.json` and returns its path. */
/** bench/results/, made when missing. */
export function resultsDir(): string {
  const dir = path.join(projectRoot(), 'bench', 'results');
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

export function writeResults(name: string, data: object): string {
  const dir = resultsDir();
  const when = new Date().toISOString();
  const file = path.join(dir, `${name}-${when.replace(/[:.]/g, '-')}.json`);
  fs.writeFileSync(file, `${JSON.stringify({ when, ...data }, null, 2)}\n`);
  return file;
}

/** CPU seconds (user + system, every thread) a process has used so far, from /proc; 0 once it is gone. */
export function cpuSeconds(pid: number, file = `/proc/${pid}/stat`): number {
  try {
    const stat = fs.readFileSync(file, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of the line, in clock ticks (USER_HZ, 100 on Linux).
    return (Number(fields[11]) + Number(fields[12])) / 100;
  } catch {
    return 0;
  }
}

/** A process's CPU seconds so far by thread kind: its main thread, the Temporal core's threads, the other threads. */
export interface ThreadCpu {
  main: number;
  core: number;
  /** The thread `threadCpu` was told is the workflow thread (see `busiestNodeThread`), when told. */
  workflow: number;
  other: number;
}

/**
 * CPU seconds by thread, from /proc/PID/task: the main thread (JS: activities, spans, scrapes), the Temporal core's
 * Rust threads (`tokio-…`, `workflow-proces…`, `temporal-real-s…`), and the others, all named `node`: the SDK's
 * workflow threads (the workflows' JS), V8's GC helpers and libuv's pool.
 */
export function threadCpu(pid: number, workflowTid?: number): ThreadCpu {
  const out: ThreadCpu = { main: 0, core: 0, workflow: 0, other: 0 };
  let tasks: string[] = [];
  try {
    tasks = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return out;
  }
  for (const tid of tasks) {
    try {
      const comm = fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      const seconds = cpuSeconds(Number(tid), `/proc/${pid}/task/${tid}/stat`);
      const kind =
        Number(tid) === pid ? 'main' : Number(tid) === workflowTid ? 'workflow' : comm === 'node' ? 'other' : 'core';
      out[kind] += seconds;
    } catch {
      // the thread ended meanwhile
    }
  }
  return out;
}

/**
 * The `node` thread, other than the main one, that has used the most CPU so far: after a warm-up, a worker's workflow
 * thread (the SDK's worker thread that runs every workflow activation), well ahead of V8's helpers and libuv's pool.
 */
export function busiestNodeThread(pid: number): number | undefined {
  let best: { tid: number; seconds: number } | undefined;
  try {
    for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
      if (Number(tid) === pid || fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim() !== 'node') continue;
      const seconds = cpuSeconds(Number(tid), `/proc/${pid}/task/${tid}/stat`);
      if (!best || seconds > best.seconds) best = { tid: Number(tid), seconds };
    }
  } catch {
    // the process or a thread ended meanwhile
  }
  return best?.tid;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export function fixed(v: number, digits = 1): string {
  return Number.isFinite(v) ? v.toFixed(digits) : String(v);
}

/** A `--only a,b` option: names from `names` (all of them when absent), each checked. */
export function listOption<T extends string>(what: string, names: readonly T[]) {
  return z
    .string()
    .optional()
    .transform((s, ctx) => {
      const picked = s ? s.split(',').map((n) => n.trim()) : [...names];
      for (const n of picked)
        if (!(names as readonly string[]).includes(n))
          ctx.addIssue({ code: 'custom', message: `unknown ${what} "${n}" (one of ${names.join(', ')})` });
      return picked as T[];
    });
}

/** The most `hang` requests the probe servers ran at once, by their own log of starts and ends. */
export function mostAtOnce(log: string): number {
  let now = 0;
  let most = 0;
  for (const e of readReceived(log)) {
    if (e.tool !== 'hang' || (e.event !== 'start' && e.event !== 'end')) continue;
    now += e.event === 'start' ? 1 : -1;
    most = Math.max(most, now);
  }
  return most;
}

/** How many `hang` requests the probe servers ran at once on average, from the first start to the last end. */
export function meanAtOnce(log: string): number {
  const events = readReceived(log)
    .filter((e) => e.tool === 'hang' && (e.event === 'start' || e.event === 'end'))
    .sort((a, b) => (a.t as number) - (b.t as number));
  if (events.length < 2) return 0;
  let now = 0;
  let area = 0;
  for (let i = 0; i < events.length; i++) {
    if (i > 0) area += now * ((events[i].t as number) - (events[i - 1].t as number));
    now += events[i].event === 'start' ? 1 : -1;
  }
  return area / ((events.at(-1)!.t as number) - (events[0].t as number));
}

/**
 * Waits until `n` workflows matching `query` have ended, counted by their end (visibility may not list a workflow just
 * started yet, so "none running" can come too early); a count refused meanwhile (a cluster whose search attributes are
 * not queryable yet) counts none. Throws past `timeoutMs`, saying how many are still open.
 */
export async function untilEnded(client: Client, query: string, n: number, timeoutMs: number, everyMs = 1000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const ended = (
      await client.workflow.count(`(${query}) AND ExecutionStatus != 'Running'`).catch(() => ({ count: 0 }))
    ).count;
    if (ended >= n) return;
    if (Date.now() > deadline) throw new Error(`${n - ended} of ${n} jobs still open after ${timeoutMs / 60_000} min`);
    await sleep(everyMs);
  }
}
