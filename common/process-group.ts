/**
 * A child process that leads its own process group, so the node can stop its whole tree (C3, H2): a sandboxed
 * server's or a harness's. The command is resolved through the node's PATH (the child's may have none).
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { Writable } from 'node:stream';

export interface GroupSpec {
  command: string;
  args: string[];
  cwd: string;
  /** The whole environment the process gets: nothing is inherited beyond it. */
  env: Record<string, string>;
  /** Bytes handed to it on file descriptors 3, 4, …, each ended once written (what bwrap reads with `--seccomp`). */
  data?: Buffer[];
  /** The node's descriptors it gets after those (a sandbox's bwrap: what it binds, ../sandbox/grants.ts). */
  fds?: number[];
}

/** Resolves a bare command through PATH (the node's, not the child's: a sandbox may have none). */
export function resolveCommand(command: string, pathEnv = process.env.PATH ?? ''): string {
  if (command === 'node') return process.execPath;
  if (command.includes('/')) return command;
  for (const dir of pathEnv.split(path.delimiter)) {
    if (!dir) continue;
    const candidate = path.join(dir, command);
    try {
      fs.accessSync(candidate, fs.constants.X_OK);
      return candidate;
    } catch {
      // not in this folder
    }
  }
  return command;
}

/** Starts the process in a group of its own, stdin/stdout/stderr piped; resolves once it has spawned. */
export function spawnGroup(spec: GroupSpec): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(resolveCommand(spec.command), spec.args, {
      cwd: spec.cwd,
      env: spec.env,
      stdio: ['pipe', 'pipe', 'pipe', ...(spec.data ?? []).map(() => 'pipe' as const), ...(spec.fds ?? [])],
      // Its own process group: the node stops the whole tree with one signal to -pid.
      detached: true,
    });
    child.once('error', reject);
    child.once('spawn', () => {
      child.off('error', reject);
      for (const [i, bytes] of (spec.data ?? []).entries()) {
        const stream = child.stdio[3 + i] as Writable;
        // A process that died before it read them: nothing to hand over.
        stream.on('error', () => undefined);
        stream.end(bytes);
      }
      resolve(child);
    });
  });
}

/** A started process group and how to stop it: a plain one, or a sandbox (activities/sandbox). */
export interface Started {
  child: ChildProcess;
  /** Whether it runs in a sandbox of its own (false: a plain process, e.g. `node.isolation: "none"`). */
  isolated: boolean;
  /** The limit a sandbox went past and was stopped for (I4), in words. */
  stoppedFor(): string | undefined;
  /** I3: what a sandbox's network refused since `since` (ms), in words (a plain process has no such network). */
  refusedSince?(since: number): string[];
  /** Stops the whole group (stdin closed, SIGTERM, SIGKILL after the grace) and removes what it left. */
  stop(graceMs: number, stdinGraceMs?: number): Promise<void>;
}

/** Starts a plain process group (a plugin server's, or any process where isolation is off). */
export async function startGroup(spec: GroupSpec): Promise<Started> {
  const child = await spawnGroup(spec);
  return {
    child,
    isolated: false,
    stoppedFor: () => undefined,
    stop: (graceMs, stdinGraceMs) => stopGroup(child, graceMs, stdinGraceMs),
  };
}

export function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch {
    return false;
  }
}

export function signalGroup(pgid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pgid, signal);
  } catch {
    // the group is gone already
  }
}

/** The processes of a group but its leader, from /proc (Linux). */
export function groupMembers(pgid: number): number[] {
  const members: number[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === pgid) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid pgrp …: comm may hold spaces and parentheses, so count from the last ')'.
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) === pgid) members.push(Number(name));
    } catch {
      // gone meanwhile
    }
  }
  return members;
}

/**
 * Stops a process's whole group the way MCP's stdio transport says: stdin closed, and `stdinGraceMs` to exit on its
 * own (a server reads the cancels queued before it, runs its handlers' cleanup, and exits); then SIGTERM, and SIGKILL
 * after `graceMs`. Resolves once the leader has exited and the group is gone (or a second after SIGKILL, for a
 * grandchild the kernel is still reaping). `spareLeader`: SIGTERM goes to every process of the group but its leader
 * — a sandbox's bwrap, whose death would take the sandbox down at once (`--die-with-parent`) before its cleanup.
 */
export async function stopGroup(
  child: ChildProcess,
  graceMs: number,
  stdinGraceMs = 0,
  spareLeader = false,
): Promise<void> {
  const pgid = child.pid;
  if (!pgid) return;
  const exited =
    child.exitCode !== null || child.signalCode !== null
      ? Promise.resolve()
      : new Promise<void>((done) => child.once('exit', () => done()));
  const leaderAlive = () => child.exitCode === null && child.signalCode === null;
  // The leader may die while a grandchild lives on in the group: each wait is for both.
  const waitFor = async (ms: number) => {
    const deadline = Date.now() + ms;
    while (Date.now() < deadline && (leaderAlive() || groupAlive(pgid))) await new Promise((r) => setTimeout(r, 25));
  };
  child.stdin?.end();
  if (stdinGraceMs > 0) await waitFor(stdinGraceMs);
  if (leaderAlive() || groupAlive(pgid)) {
    if (spareLeader) {
      for (const pid of groupMembers(pgid)) {
        try {
          process.kill(pid, 'SIGTERM');
        } catch {
          // gone meanwhile
        }
      }
    } else signalGroup(pgid, 'SIGTERM');
    await waitFor(graceMs);
    signalGroup(pgid, 'SIGKILL');
  }
  await exited;
  for (let i = 0; i < 40 && groupAlive(pgid); i++) await new Promise((r) => setTimeout(r, 25));
}
