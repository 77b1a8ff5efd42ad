/**
 * I6: whether a sandbox can start on this machine at all, found by starting an empty one with its system-call filter
 * on, and what to do when it cannot; and what a path is, for a sandbox's plan (./plan.ts).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { resolveCommand } from '../../common/process-group';
import type { FoundBwrap } from './bwrap';
import { bwrapArgs } from './plan';
import type { PathKind, SandboxPlan } from './plan';

export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function probePath(p: string): PathKind {
  try {
    const stat = fs.lstatSync(p);
    if (stat.isSymbolicLink()) return { kind: 'symlink', target: fs.readlinkSync(p) };
    return stat.isDirectory() ? { kind: 'dir' } : { kind: 'file' };
  } catch {
    return { kind: 'missing' };
  }
}

/**
 * Why no sandbox can start here, with how to fix it; undefined when an empty one starts with its system-call filter
 * on (I1: `Seccomp: 2` in its own /proc/self/status) and exits 0. The filter comes on its stdin.
 */
export function probeProblem(
  bwrap: FoundBwrap,
  dropTo: { uid: number; gid: number } | undefined,
  filter: Buffer,
): string | undefined {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-probe-'));
  try {
    const plan: SandboxPlan = {
      command: '/bin/sh',
      args: [
        '-c',
        'grep -q "^Seccomp:[[:space:]]*2" /proc/self/status || { echo "no seccomp filter in force" >&2; exit 1; }',
      ],
      seccompFd: 0,
      cwd: dir,
      read: [],
      write: [],
      hidden: [],
      network: 'none',
      dropTo: dropTo && { ...dropTo, setpriv: resolveCommand('setpriv') },
    };
    if (dropTo) fs.chownSync(dir, dropTo.uid, dropTo.gid);
    const run = spawnSync(bwrap.path, bwrapArgs(plan, probePath), { input: filter, encoding: 'utf8', timeout: 10_000 });
    if (run.status === 0) return undefined;
    const said = `${run.stderr ?? ''}${run.error ? run.error.message : ''}`.trim().split('\n').slice(-2).join(' ');
    return `bubblewrap at ${bwrap.path} (${bwrap.from}) could not make a sandbox (${said || `exit ${run.status}`}): ${hintFor(said, dropTo !== undefined)}`;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function hintFor(said: string, root: boolean): string {
  if (/setpriv/.test(said)) return "the node runs as root and needs util-linux's setpriv to drop to the sandbox user";
  if (/mount proc/i.test(said)) {
    return 'the container hides parts of /proc, so a sandbox cannot mount its own: run it with `security_opt: [systempaths=unconfined]` (docs/deploy.md)';
  }
  if (root) return 'as root the node needs CAP_SYS_ADMIN to make namespaces; see docs/isolation.md';
  return 'this machine does not let the node make user namespaces: `sysctl kernel.unprivileged_userns_clone=1` (Debian), `user.max_user_namespaces` above 0, on Ubuntu 24.04 `kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap; in a container, the security options in docs/deploy.md';
}
