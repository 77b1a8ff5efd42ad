/**
 * A cluster script still running is asked to stop (SIGINT, as its Ctrl-C). One whose `npm run cluster` died without its clean-up (kill -9, a closed terminal) leaves its processes
 * running. The running script writes their pids and command lines to `<state>/pids.json`; the next run, and
 * `--down`, stop those still alive with the same command line (a pid reused by another program is left alone),
 * and PostgreSQL through its own postmaster.pid.
 */
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { descendants } from '../../worker/processes';

const PidsSchema = z.array(z.strictObject({ pid: z.number().int(), cmdline: z.string() }));
const ControlPidSchema = z.object({ pid: z.number().int() });

function cmdline(pid: number): string | undefined {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8');
  } catch {
    return undefined;
  }
}

export function writePids(stateDir: string): void {
  const pids = descendants(process.pid).flatMap((pid) => {
    const cmd = cmdline(pid);
    return cmd ? [{ pid, cmdline: cmd }] : [];
  });
  fs.writeFileSync(path.join(stateDir, 'pids.json'), `${JSON.stringify(pids)}\n`);
}

async function stopPids(pids: number[], signal: NodeJS.Signals, graceMs = 30_000): Promise<void> {
  const alive = () => pids.filter((p) => cmdline(p) !== undefined);
  for (const p of alive()) process.kill(p, signal);
  const deadline = Date.now() + graceMs;
  while (alive().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  for (const p of alive()) process.kill(p, 'SIGKILL');
}

export async function stopLeftovers(stateDir: string, say: (line: string) => void): Promise<void> {
  // A cluster script still running from this folder stops its own cluster, in order, on SIGINT (its Ctrl-C).
  const control = path.join(stateDir, 'control.json');
  if (fs.existsSync(control)) {
    const pid = ControlPidSchema.safeParse(JSON.parse(fs.readFileSync(control, 'utf8')));
    if (pid.success && cmdline(pid.data.pid)?.includes('cluster')) {
      say(`stopping the cluster that runs from ${stateDir} (pid ${pid.data.pid})`);
      await stopPids([pid.data.pid], 'SIGINT', 90_000);
    }
  }
  const file = path.join(stateDir, 'pids.json');
  if (fs.existsSync(file)) {
    const recorded = PidsSchema.safeParse(JSON.parse(fs.readFileSync(file, 'utf8')));
    const running = (recorded.success ? recorded.data : []).filter((r) => cmdline(r.pid) === r.cmdline);
    const others = running.filter((r) => !r.cmdline.includes('postgres'));
    if (running.length > 0) say(`stopping ${running.length} process(es) left by an earlier run`);
    await stopPids(
      others.map((r) => r.pid),
      'SIGTERM',
    );
    fs.rmSync(file, { force: true });
  }
  const postmaster = path.join(stateDir, 'pg', 'postmaster.pid');
  if (fs.existsSync(postmaster)) {
    const pid = Number(fs.readFileSync(postmaster, 'utf8').split('\n')[0]);
    if (cmdline(pid)?.includes('postgres')) {
      say(`stopping the PostgreSQL left by an earlier run (pid ${pid}, fast shutdown)`);
      await stopPids([pid], 'SIGINT');
    }
  }
}
