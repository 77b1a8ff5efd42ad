/** Worker processes for multi-node tests and the chaos runs: start `oz0 worker`, and lose a node (kill -9). */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../common/paths';

/** Where a worker's output goes, and what it gets beyond this process's environment. */
export interface WorkerOptions {
  /** Appends everything the node writes (its JSON log on stderr, stdout) to this file; default: dropped once ready. */
  logFile?: string;
  env?: Record<string, string>;
  /** A process group of its own, so a Ctrl-C at the terminal reaches only the script that stops it in order. */
  detached?: boolean;
  /** Node's own flags for the process (e.g. `--cpu-prof`, which NODE_OPTIONS does not take). */
  nodeFlags?: string[];
  /** The checkout whose `bin/oz0` runs (N6: the previous release's, built beside this one); default this one. */
  root?: string;
}

/**
 * Starts `oz0 worker` (kept in `workers`, for clean-up) and resolves once it says it is ready. Its log (stderr) is
 * appended to `opts.logFile` when given, else dropped once it is ready.
 */
export async function startWorker(
  file: string,
  name: string,
  workers: ChildProcess[] = [],
  opts: WorkerOptions = {},
): Promise<{ proc: ChildProcess; exited: Promise<number | null> }> {
  if (opts.logFile) fs.mkdirSync(path.dirname(opts.logFile), { recursive: true });
  const log = opts.logFile ? fs.openSync(opts.logFile, 'a') : undefined;
  const oz0 = [path.join(opts.root ?? projectRoot(), 'bin', 'oz0'), 'worker', '--config', file, '--name', name];
  const [command, ...args] = opts.nodeFlags?.length ? [process.execPath, ...opts.nodeFlags, ...oz0] : oz0;
  const proc = spawn(command, args, {
    stdio: ['ignore', log ?? 'ignore', 'pipe'],
    env: { ...process.env, OZ0_LOG_LEVEL: 'info', ...opts.env },
    detached: opts.detached,
  });
  // stderr is piped to find the ready line; a copy of all of it goes to the log as well.
  if (log !== undefined) proc.stderr!.pipe(fs.createWriteStream('', { fd: log }));
  workers.push(proc);
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  await stderrLine(proc, /oz0 worker: node/, `worker ${name}`, 60_000);
  return { proc, exited };
}

/** Every descendant of a process (children, grandchildren, …), from /proc. */
export function descendants(pid: number): number[] {
  const parents = new Map<number, number[]>();
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parents.set(ppid, [...(parents.get(ppid) ?? []), Number(entry)]);
    } catch {
      // gone already
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const child of parents.get(p) ?? []) {
      out.push(child);
      walk(child);
    }
  };
  walk(pid);
  return out;
}

/**
 * The processes working in `dir` or below it (by their working directory, read from the node's side): a sandbox's,
 * whose pids inside are its namespace's and say nothing here.
 */
export function processesIn(dir: string): number[] {
  const out: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cwd = fs.readlinkSync(`/proc/${entry}/cwd`);
      if (cwd === dir || cwd.startsWith(`${dir}/`)) out.push(Number(entry));
    } catch {
      // gone already, or not ours to read
    }
  }
  return out;
}

/** A machine lost: kill -9 a node and everything it started, at once. */
export function killTree(pid: number): void {
  for (const p of [pid, ...descendants(pid)]) {
    try {
      process.kill(p, 'SIGKILL');
    } catch {
      // gone already
    }
  }
}

/**
 * Resolves with the first match of `pattern` in what a child writes to stderr; rejects, with all it wrote, if it
 * exits first or stays silent past `ms`. Its stderr is drained to the end, and kept only until the match.
 */
export function stderrLine(proc: ChildProcess, pattern: RegExp, what: string, ms: number): Promise<RegExpExecArray> {
  let err = '';
  let matched = false;
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${what} did not start: ${err}`)), ms);
    proc.stderr!.on('data', (chunk: Buffer) => {
      if (matched) return;
      err += chunk.toString();
      const m = pattern.exec(err);
      if (m) {
        matched = true;
        clearTimeout(timer);
        resolve(m);
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited ${code}: ${err}`));
    });
  });
}

/**
 * An example server (dist/examples/<script>.js) serving Streamable HTTP as its own process, as a remote MCP
 * server would be: no event loop shared with the node or the measure. Resolves with its URL once it listens.
 */
export async function startHttpExample(
  script: string,
  env: Record<string, string>,
  opts: Omit<WorkerOptions, 'env'> = {},
): Promise<{ url: string; proc: ChildProcess; close(): Promise<void> }> {
  const log = opts.logFile ? fs.openSync(opts.logFile, 'a') : undefined;
  const proc = spawn(process.execPath, [script, '--http', '0'], {
    stdio: ['ignore', log ?? 'ignore', 'pipe'],
    env: { ...process.env, ...env },
    detached: opts.detached,
  });
  if (log !== undefined) proc.stderr!.pipe(fs.createWriteStream('', { fd: log }));
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const [, url] = await stderrLine(proc, /^listening (\S+)$/m, script, 30_000);
  return {
    url,
    proc,
    async close() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}
