/**
 * What a sandbox's processes use, read from /proc where no control group counts it (the rlimit mode of ./limits.ts):
 * its tasks (processes and threads, as RLIMIT_NPROC and `pids.max` count them), its CPU time and its resident memory.
 * A sandbox is its bwrap and every process below it: a PID namespace keeps every process of the sandbox below its
 * init, whatever it does (an orphan is its init's child), so the tree from bwrap is the sandbox, exactly.
 *
 * CPU time is each live process's own plus what it reaped of its children (`cutime`, `cstime`): every process that
 * ever ran is counted once, except a child its parent let the kernel reap (SIGCHLD ignored, SA_NOCLDWAIT), whose time
 * goes nowhere. So the count is a floor, and the node cannot hold CPU time on it alone (./holds.ts).
 */
import fs from 'node:fs';

export interface TreeUsage {
  /** Processes and threads. */
  tasks: number;
  /** User and system time of every live process and of the children each has reaped. */
  cpuSeconds: number;
  /** Anonymous and shared resident memory of every process (a page two processes share counts twice). */
  residentBytes: number;
  /** The sandbox's init (its PID namespace's pid 1), where its own mounts are seen: `/proc/<init>/root`. */
  init?: number;
}

interface ProcStat {
  ppid: number;
  ticks: number;
  threads: number;
}

/** The kernel's USER_HZ: 100 on every architecture Linux distributions build for. */
const TICKS = 100;
/** One reading of /proc serves every sandbox that asks within this long. */
const FRESH_MS = 100;

let scan: { at: number; stats: Map<number, ProcStat>; children: Map<number, number[]> } | undefined;

/** `pid (comm) state ppid …`: comm may hold spaces and parentheses, so fields count from the last `)`. */
export function parseStat(text: string): ProcStat {
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // After comm: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14) … num_threads(17).
  return {
    ppid: Number(f[1]),
    ticks: Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14]),
    threads: Number(f[17]),
  };
}

function readProc(): NonNullable<typeof scan> {
  const now = Date.now();
  if (scan && now - scan.at < FRESH_MS) return scan;
  const stats = new Map<number, ProcStat>();
  const children = new Map<number, number[]>();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = parseStat(fs.readFileSync(`/proc/${name}/stat`, 'utf8'));
      const pid = Number(name);
      stats.set(pid, stat);
      children.set(stat.ppid, [...(children.get(stat.ppid) ?? []), pid]);
    } catch {
      // gone meanwhile
    }
  }
  return (scan = { at: now, stats, children });
}

/** A `Name:  value kB` line of /proc/<pid>/status, in bytes. */
export function statusBytes(text: string, key: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${key}:`));
  return line
    ? Number(
        line
          .slice(key.length + 1)
          .trim()
          .split(/\s+/)[0],
      ) * 1024
    : 0;
}

/** What the processes from `root` down use now. */
export function treeUsage(root: number): TreeUsage {
  const { stats, children } = readProc();
  const usage: TreeUsage = { tasks: 0, cpuSeconds: 0, residentBytes: 0, init: children.get(root)?.[0] };
  const stack = stats.has(root) ? [root] : [];
  while (stack.length) {
    const pid = stack.pop()!;
    const stat = stats.get(pid);
    if (!stat) continue;
    usage.tasks += stat.threads;
    usage.cpuSeconds += stat.ticks / TICKS;
    try {
      const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
      usage.residentBytes += statusBytes(status, 'RssAnon') + statusBytes(status, 'RssShmem');
    } catch {
      // gone meanwhile
    }
    stack.push(...(children.get(pid) ?? []));
  }
  return usage;
}

/**
 * Bytes a sandbox's own tmpfs holds (`/tmp`, `/dev/shm`), seen through its init's root; 0 when unreadable, and 0 while
 * that folder is still the node's own: bubblewrap's child sees the node's file systems until it has made its root,
 * and the node's `/tmp` (its disk) read as the sandbox's would stop a sandbox that had written nothing.
 */
export function tmpfsBytes(init: number | undefined, where: string): number {
  if (init === undefined) return 0;
  try {
    const seen = `/proc/${init}/root${where}`;
    if (fs.statSync(seen).dev === fs.statSync(where).dev) return 0;
    const s = fs.statfsSync(seen);
    return (s.blocks - s.bfree) * s.bsize;
  } catch {
    return 0;
  }
}

/** The first child of a process (a sandbox's init, below its bwrap), from /proc. */
export function firstChild(pid: number): number | undefined {
  try {
    const listed = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/)[0];
    if (listed) return Number(listed);
  } catch {
    // no children file (CONFIG_PROC_CHILDREN off): read every process's parent
  }
  return readProc().children.get(pid)?.[0];
}
