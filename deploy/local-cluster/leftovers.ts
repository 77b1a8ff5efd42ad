/**
 * A cluster whose `npm run cluster` died without its clean-up (kill -9, a closed terminal) leaves its processes
 * running. The running script writes their pids and command lines to `<state>/pids.json`; the next run, and
 * `--down`, stop those still alive with the same command line (a pid reused by another program is left alone),
 * and PostgreSQL through its own postmaster.pid.
 */
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { descendants } from '../../worker/processes';

const PidsSchema = z.array(z.strictObject({ pid: z.number().int(), cmdline: z.string() }));

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

async function stopPids(pids: number[], signal: NodeJS.Signals): Promise<void> {
  const alive = () => pids.filter((p) => cmdline(p) !== undefined);
  for (const p of alive()) process.kill(p, signal);
  const deadline = Date.now() + 30_000;
  while (alive().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
  for (const p of alive()) process.kill(p, 'SIGKILL');
}

export async function stopLeftovers(stateDir: string, say: (line: string) => void): Promise<void> {
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
