/**
 * I9: a node that restarts stops what a node before it left. Each node keeps its sandboxes' and sessions' folders in
 * folders of its own under the state folder, each claimed with its process (pid and start time, so a pid used again
 * is told apart). A starting node looks at every such folder whose node is gone: a process still working in it (a
 * sandbox's process that outlived its node: with `node.isolation: "none"` nothing ties it to the node; bubblewrap's
 * `--die-with-parent` ends a sandbox with its node) is stopped with its process group, whatever its job — no node can
 * reach it any more, and a job that still runs starts a fresh sandbox on its next call — and the folder is removed.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../../common/logger';
import { within } from './plan';

/** The file that says which node process owns a folder of sandboxes or sessions. */
const CLAIM = '.node.json';

interface Claim {
  pid: number;
  /** The process's start time, in clock ticks after boot (/proc/<pid>/stat, field 22). */
  started: number;
}

function startedOf(pid: number): number | undefined {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]);
  } catch {
    return undefined;
  }
}

/** Makes `dir` and claims it for this process. */
export function claimFolder(dir: string): void {
  fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
  const claim: Claim = { pid: process.pid, started: startedOf(process.pid) ?? 0 };
  fs.writeFileSync(path.join(dir, CLAIM), JSON.stringify(claim));
}

/** Whether the node that claimed a folder is gone (an unclaimed folder is left alone: it may be being claimed). */
function ownerGone(dir: string): Claim | undefined {
  let claim: Claim;
  try {
    claim = JSON.parse(fs.readFileSync(path.join(dir, CLAIM), 'utf8')) as Claim;
  } catch {
    return undefined;
  }
  return startedOf(claim.pid) === claim.started ? undefined : claim;
}

/** The processes whose working directory is inside `dir`, with their process groups. */
function workingIn(dir: string): Array<{ pid: number; pgid: number }> {
  const out: Array<{ pid: number; pgid: number }> = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      if (!within(fs.readlinkSync(`/proc/${name}/cwd`), dir)) continue;
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      out.push({ pid: Number(name), pgid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) });
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
  return out;
}

/**
 * Stops the processes left in the folders of nodes that are gone, under `roots` (the state folder's `sandboxes` and
 * `sessions`), and removes those folders. Returns how many processes it stopped.
 */
export async function stopLeftovers(roots: string[], logger: Logger): Promise<number> {
  let stopped = 0;
  for (const root of roots) {
    if (!fs.existsSync(root)) continue;
    for (const name of fs.readdirSync(root)) {
      const dir = path.join(root, name);
      const gone = ownerGone(dir);
      if (!gone) continue;
      const left = workingIn(dir);
      for (const { pid, pgid } of left) {
        for (const target of new Set([-pgid, pid])) {
          try {
            process.kill(target, 'SIGKILL');
          } catch {
            // gone already
          }
        }
      }
      for (let i = 0; i < 80 && workingIn(dir).length > 0; i++) await new Promise((r) => setTimeout(r, 25));
      if (left.length) {
        logger.warn(
          { folder: dir, node: gone.pid, processes: left.map((p) => p.pid) },
          'stopped processes a node that is gone left in its sandboxes (I9)',
        );
      }
      stopped += left.length;
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }
  return stopped;
}
