/**
 * A running sandbox under watch (I4): its limits and its /tmp read every 250 ms (a control group's counters, or
 * /proc where there is none; its tmpfs's usage), its folder and write grants walked as often as a walk's cost allows
 * (./disk.ts), and past any limit it is stopped at once (SIGKILL to its group) and says which. Between two readings a
 * sandbox can write what its disk takes in that time (RLIMIT_FSIZE bounds any one file at its limit). Once it is gone,
 * what it held is let go: its network, its control groups, what it left in its write grants (handed over), its uid.
 */
import type { ChildProcess } from 'node:child_process';
import type { SandboxNetwork } from './network';
import type { Logger } from '../../common/logger';
import { stopGroup } from '../../common/process-group';
import type { Started } from '../../common/process-group';
import { firstChild, tmpfsBytes } from './census';
import { diskBytes } from './disk';
import type { DiskScope } from './disk';
import { words } from './limits';
import type { Limits, LimitsHandle } from './limits';

/** How often a running sandbox's limits are read. */
const WATCH_MS = 250;
/** Disk walks: at least this far apart, and {@link WALK_SPACING} times as long as the last one took (a twentieth of
 * the node's time at most, however many files a sandbox makes). */
const WALK_MS = 250;
const WALK_SPACING = 20;
/**
 * What one entry may cost a walk at most, as its spacing counts it: a walk's time is its wall time, which also holds
 * whatever else kept the node's event loop or thread pool busy meanwhile (other sandboxes starting, a loaded
 * machine). Without a bound, one stalled walk of a few files puts the next seconds away, and a filler writes far
 * past its limit in between (the likeliest reason a fresh clone's CI, at load 3, saw 256 MiB written against 32).
 * An entry's lstat takes tens of microseconds; a walk's own cost is counted up to a millisecond an entry.
 */
const ENTRY_MS = 1;

/** When the next disk walk runs, after one that read `entries` entries in `tookMs` of wall time. */
export function nextWalkMs(tookMs: number, entries: number): number {
  return Math.max(WALK_MS, WALK_SPACING * Math.min(tookMs, Math.max(1, entries) * ENTRY_MS));
}

export interface Watched {
  child: ChildProcess;
  limits: Limits;
  handle: LimitsHandle;
  disk: DiskScope;
  who: string;
  logger: Logger;
  /** I3: its network, whose refusals the attempt's note tells. */
  network?: SandboxNetwork;
  /** Lets go of what the sandbox held beyond its limits (its network, its write grants, its uid), once it is gone. */
  release(): Promise<void>;
}

export function watchSandbox(w: Watched): Started {
  const { child, handle, limits } = w;
  let breach: string | undefined;
  let gone = false;
  const kill = () => {
    try {
      process.kill(-child.pid!, 'SIGKILL');
    } catch {
      // gone already
    }
  };
  const found = (limit: string | undefined) => {
    if (breach || !limit || gone) return;
    breach = limit;
    w.logger.warn({ sandbox: w.who, limit }, 'a sandbox went past a limit and was stopped');
    kill();
  };
  const diskLimit = limits.diskMiB * 1024 * 1024;
  /** What the last walk found in its folder and write grants. */
  let walked = 0;
  let init: number | undefined;
  const timer = setInterval(() => {
    found(handle.breach(child.pid));
    init ??= firstChild(child.pid!);
    if (walked + tmpfsBytes(init, '/tmp') >= diskLimit) found(words.disk(limits));
  }, WATCH_MS);
  timer.unref();
  let walkTimer: NodeJS.Timeout | undefined;
  const walk = async () => {
    if (gone || breach) return;
    const started = performance.now();
    const { bytes, entries } = await diskBytes(w.disk, diskLimit);
    walked = bytes;
    if (walked >= diskLimit) found(words.disk(limits));
    const took = performance.now() - started;
    if (!gone) walkTimer = setTimeout(() => void walk(), nextWalkMs(took, entries)).unref();
  };
  walkTimer = setTimeout(() => void walk(), WALK_MS).unref();
  let cleaned: Promise<void> | undefined;
  const cleanup = () =>
    (cleaned ??= (async () => {
      gone = true;
      clearInterval(timer);
      clearTimeout(walkTimer);
      await handle.dispose();
      await w.release();
    })());
  child.once('exit', (code) => {
    // Read before the group is removed: a process the kernel stopped for memory shows only there.
    found(handle.breach(undefined, { code }));
    gone = true;
    void cleanup();
  });
  return {
    child,
    isolated: true,
    stoppedFor: () => breach,
    refusedSince: (since) => w.network?.refusedSince(since) ?? [],
    stop: async (graceMs, stdinGraceMs) => {
      await stopGroup(child, graceMs, stdinGraceMs, true);
      await cleanup();
    },
  };
}
