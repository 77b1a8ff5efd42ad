/** Worker processes for multi-node tests and the chaos runs: start `oz0 worker`, and lose a node (kill -9). */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../worker/paths';

/** Starts `oz0 worker` (kept in `workers`, for clean-up) and resolves once it says it is ready. */
export async function startWorker(
  file: string,
  name: string,
  workers: ChildProcess[] = [],
): Promise<{ proc: ChildProcess; exited: Promise<number | null> }> {
  const proc = spawn(path.join(projectRoot(), 'bin', 'oz0'), ['worker', '--config', file, '--name', name], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, OZ0_LOG_LEVEL: 'info' },
  });
  workers.push(proc);
  const exited = new Promise<number | null>((resolve) => proc.once('exit', (code) => resolve(code)));
  let err = '';
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`worker ${name} did not start: ${err}`)), 60_000);
    proc.stderr!.on('data', (chunk: Buffer) => {
      err += chunk.toString();
      if (err.includes('oz0 worker: node')) {
        clearTimeout(timer);
        resolve();
      }
    });
    proc.once('exit', (code) => reject(new Error(`worker ${name} exited ${code}: ${err}`)));
  });
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
