/** Worker processes for multi-node tests and the chaos runs: start `oz0 worker`, and lose a node (kill -9). */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
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

/**
 * An example server (dist/examples/<script>.js) serving Streamable HTTP as its own process, as a remote MCP
 * server would be: no event loop shared with the node or the measure. Resolves with its URL once it listens.
 */
export async function startHttpExample(
  script: string,
  env: Record<string, string>,
): Promise<{ url: string; proc: ChildProcess; close(): Promise<void> }> {
  const proc = spawn(process.execPath, [script, '--http', '0'], {
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, ...env },
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  let err = '';
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${script} did not listen: ${err}`)), 30_000);
    proc.stderr!.on('data', (chunk: Buffer) => {
      err += chunk.toString();
      const m = /^listening (\S+)$/m.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
    proc.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${script} exited ${code}: ${err}`));
    });
  });
  return {
    url,
    proc,
    async close() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

/**
 * Follows a file of received records (examples/common recordReceived) from where the last look ended, so a poll
 * every few milliseconds reads only what was added, not the whole file; a torn last line waits for its end.
 */
export function tailReceived(file: string): () => Array<Record<string, unknown>> {
  let offset = 0;
  let rest = '';
  const decoder = new StringDecoder('utf8');
  return () => {
    let fd: number;
    try {
      fd = fs.openSync(file, 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    try {
      const size = fs.fstatSync(fd).size;
      if (size <= offset) return [];
      const buf = Buffer.alloc(size - offset);
      const n = fs.readSync(fd, buf, 0, buf.length, offset);
      offset += n;
      const lines = (rest + decoder.write(buf.subarray(0, n))).split('\n');
      rest = lines.pop()!;
      return lines.filter((l) => l.trim()).map((l) => JSON.parse(l) as Record<string, unknown>);
    } finally {
      fs.closeSync(fd);
    }
  };
}
