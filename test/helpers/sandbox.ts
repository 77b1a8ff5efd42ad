/**
 * Sandboxes in tests (SPEC I): the grants a Node.js program of this repository needs, folders a sandbox may write,
 * and the node's view of a sandbox's processes (inside, a pid is its namespace's, the same in every sandbox).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { SandboxConfig } from '../../common/config';
import { ROOT, tmpDir } from './temporal';

/** What a Node.js program of this repository reads: the compiled code and its packages (relative to the repo). */
export const NODE_PROGRAM = ['dist', 'node_modules'];

/** A `sandbox` block: the Node.js program's files, and whatever else is given. */
export function sandboxed(grants: Partial<Omit<SandboxConfig, 'read'>> & { read?: string[] } = {}) {
  return { ...grants, read: [...NODE_PROGRAM, ...(grants.read ?? [])] };
}

/** A fresh folder a sandbox's unprivileged user may write (a node running as root drops to uid 65534). */
export function writableDir(prefix = 'oz0-sandbox-'): string {
  const dir = tmpDir(prefix);
  fs.chmodSync(dir, 0o777);
  return dir;
}

/** A fresh file in a {@link writableDir}, that a sandbox and the node's own processes may both append to. */
export function sharedFile(name: string): { dir: string; file: string } {
  const dir = writableDir();
  const file = path.join(dir, name);
  fs.writeFileSync(file, '');
  fs.chmodSync(file, 0o666);
  return { dir, file };
}

export interface HostProcess {
  pid: number;
  pgid: number;
  cmdline: string;
}

/** The node's view of the processes whose command line holds `marker` (e.g. a probe's `oz0-probe <instance>`). */
export function hostProcesses(marker: string): HostProcess[] {
  return processesWhere((p) => p.cmdline.includes(marker));
}

/**
 * The node's view of the processes working in a folder whose path holds `marker` (a sandbox's or a session's: bwrap
 * takes its options on a descriptor, so its command line no longer names the folder; its working folder does).
 */
export function hostProcessesIn(marker: string): HostProcess[] {
  return processesWhere((p) => fs.readlinkSync(`/proc/${p.pid}/cwd`).includes(marker));
}

/** Every process on the node that `keep` keeps (one that is gone meanwhile is left out). */
function processesWhere(keep: (p: { pid: number; cmdline: string }) => boolean): HostProcess[] {
  const out: HostProcess[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const pid = Number(name);
      const cmdline = fs.readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').join(' ').trim();
      if (!keep({ pid, cmdline })) continue;
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      out.push({ pid, pgid: Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]), cmdline });
    } catch {
      // gone meanwhile
    }
  }
  return out;
}

/** The command line of a process on the node. */
export function cmdlineOf(pid: number): string {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
  } catch {
    return '';
  }
}

export { ROOT };

/** The probe harness (test/fixtures/harness.js) in a config: it does what its input's steps say, with these tools. */
export function probeHarness(tools: string[], sandbox: ReturnType<typeof sandboxed> = sandboxed()) {
  return {
    command: 'node',
    args: [path.join(ROOT, 'test', 'fixtures', 'harness.js')],
    env: { NODE_PATH: path.join(ROOT, 'node_modules') },
    tools,
    timeoutSeconds: 120,
    sandbox,
  };
}
