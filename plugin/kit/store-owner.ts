/**
 * Who holds a claim on a key, and whether that holder still lives. A claim says "this process is running `fn` for
 * this key"; the store lets another process take it over only when its owner is dead, because taking over a live
 * owner's claim would run `fn` twice.
 *
 * On Linux an owner is named by its kernel (boot id), its pid namespace, its pid and its start time (from
 * `/proc/<pid>/stat`): a process that died and whose pid was given to another is not taken for the owner, and a pid
 * of another container's namespace is never looked up in ours. An owner we cannot look up that way (another machine
 * or container, or a platform without `/proc`) is alive while its store keeps refreshing the claim's `seen_at`.
 */
import fs from 'node:fs';
import os from 'node:os';

/** The process that holds a claim, as the claims table keeps it. */
export interface Owner {
  /** `os.hostname()`: for people reading the table, and for the fallback check off Linux. */
  host: string;
  /** `<boot id>/<pid namespace>` on Linux, or `''` where it cannot be read: pids compare only within one. */
  kernel: string;
  pid: number;
  /** The process's start time: clock ticks after boot from `/proc/<pid>/stat`, or ms since 1970 off Linux. */
  start: string;
}

/** A claim as another process sees it: its owner, and when its store last said that owner was alive (ms). */
export interface ClaimHolder extends Owner {
  seenAt: number;
}

/** An owner that is surely dead: a claim whose run failed to record, given up for the next caller to take over. */
export const NO_OWNER: Owner = { host: '', kernel: '', pid: 0, start: '' };

function readOr(file: string, fallback: string): string {
  try {
    return fs.readFileSync(file, 'utf8').trim();
  } catch {
    return fallback;
  }
}

/** Field 22 of `/proc/<pid>/stat`, the start time; after the last `)`, since the command name may hold anything. */
export function procStartTime(pid: number): string | undefined {
  const stat = readOr(`/proc/${pid}/stat`, '');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // The fields after the name start at field 3.
  return fields.length > 19 ? fields[19] : undefined;
}

function kernelId(): string {
  const boot = readOr('/proc/sys/kernel/random/boot_id', '');
  let ns = '';
  try {
    ns = fs.readlinkSync('/proc/self/ns/pid');
  } catch {
    // Not Linux, or /proc is not mounted.
  }
  return boot && ns ? `${boot}/${ns}` : '';
}

let self: Owner | undefined;

/** This process as an owner (worker threads of one process are the same owner). */
export function thisProcess(): Owner {
  if (!self) {
    const kernel = kernelId();
    const procStart = kernel ? procStartTime(process.pid) : undefined;
    // Without a start time that others can read back, the pid alone would be compared: that is the fallback.
    self =
      procStart !== undefined
        ? { host: os.hostname(), kernel, pid: process.pid, start: procStart }
        : { host: os.hostname(), kernel: '', pid: process.pid, start: String(Date.now() - process.uptime() * 1000) };
  }
  return self;
}

/**
 * Whether the owner of a claim may still be running `fn`. `staleMs` bounds how long an owner we cannot look up is
 * believed alive without a fresh `seenAt`.
 */
export function ownerAlive(holder: ClaimHolder, now: number, staleMs: number, me: Owner = thisProcess()): boolean {
  if (holder.pid <= 0) return false;
  if (holder.kernel !== '' && holder.kernel === me.kernel) {
    return procStartTime(holder.pid) === holder.start;
  }
  if (holder.kernel === '' && me.kernel === '' && holder.host === me.host && !pidExists(holder.pid)) return false;
  return now - holder.seenAt < staleMs;
}

function pidExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it exists, and belongs to someone else.
    return (err as NodeJS.ErrnoException).code !== 'ESRCH';
  }
}

/** The owner in words, for the busy answer and errors. */
export function describeOwner(owner: Owner): string {
  return `pid ${owner.pid} on ${owner.host || 'an unknown host'}`;
}
