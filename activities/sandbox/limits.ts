/**
 * A sandbox's limits (I4): memory, processes and CPU time of the whole sandbox, in a control group of its own, which
 * the node watches: past a limit the sandbox is stopped and the attempt says which. A cgroup v2 tree (a delegated
 * subtree, or the node as root) or the v1 controllers memory, pids and cpuacct; where the node may create neither,
 * resource limits of each process (setrlimit: CPU seconds, data size) — coarser, and the node says so at start.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { SandboxConfig } from '../../common/config';

export type Limits = Pick<SandboxConfig, 'memoryMiB' | 'pids' | 'cpuSeconds'>;

/** One sandbox's limits while it runs. */
export interface LimitsHandle {
  /** Put before the sandbox's command: it enters the limits, then execs the rest. */
  readonly prefix: string[];
  /** The limit it went past, in words with its setting's name; undefined while within them all. */
  breach(exit?: { code: number | null }): string | undefined;
  /** Removes what the limits left once the sandbox is gone. */
  dispose(): Promise<void>;
}

export interface LimitsBackend {
  /** `cgroup v2`, `cgroup v1` or `rlimit`. */
  readonly kind: string;
  /** What this backend cannot hold to, in words (empty when it holds to all three limits). */
  readonly gaps: string[];
  create(id: string, limits: Limits): LimitsHandle;
  /** Removes this node's folder of groups (once its sandboxes are gone). */
  close(): Promise<void>;
}

const CGROUP_ROOT = '/sys/fs/cgroup';
/** Enters every file's control group (writing its own pid in each), then becomes the sandbox's command. */
const JOIN = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; exec "$@"';

const words = {
  memory: (l: Limits) => `its memory limit of ${l.memoryMiB} MiB (sandbox.memoryMiB)`,
  pids: (l: Limits) => `its limit of ${l.pids} processes (sandbox.pids)`,
  cpu: (l: Limits) => `its CPU time of ${l.cpuSeconds} s (sandbox.cpuSeconds)`,
};

/** A `name value` line of a cgroup's flat-keyed file (memory.events, pids.events, cpu.stat), 0 when missing. */
export function keyed(text: string, key: string): number {
  const line = text.split('\n').find((l) => l.startsWith(`${key} `));
  return line ? Number(line.slice(key.length + 1)) : 0;
}

function read(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

/** Removes a control group once its last process is gone (a dying sandbox may take a moment). */
async function removeGroup(dir: string): Promise<void> {
  for (let i = 0; i < 80; i++) {
    try {
      fs.rmdirSync(dir);
      return;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return;
      await new Promise((r) => setTimeout(r, 25));
    }
  }
}

/** The node's own control group in each hierarchy, from /proc/self/cgroup: `0` for v2, a controller's name for v1. */
export function ownGroups(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const [id, controllers, where] = line.split(':');
    if (where === undefined) continue;
    if (id === '0' && controllers === '') out.set('0', where);
    for (const c of controllers.split(',')) if (c) out.set(c, where);
  }
  return out;
}

class V2 implements LimitsBackend {
  readonly kind = 'cgroup v2';
  readonly gaps: string[] = [];
  constructor(private readonly base: string) {}

  close(): Promise<void> {
    return removeGroup(this.base);
  }

  create(id: string, limits: Limits): LimitsHandle {
    const dir = path.join(this.base, id);
    fs.mkdirSync(dir);
    fs.writeFileSync(path.join(dir, 'memory.max'), String(limits.memoryMiB * 1024 * 1024));
    if (fs.existsSync(path.join(dir, 'memory.swap.max'))) fs.writeFileSync(path.join(dir, 'memory.swap.max'), '0');
    // One process past the memory limit takes the whole sandbox with it.
    fs.writeFileSync(path.join(dir, 'memory.oom.group'), '1');
    fs.writeFileSync(path.join(dir, 'pids.max'), String(limits.pids));
    return {
      prefix: ['/bin/sh', '-c', JOIN, 'oz0-limits', '1', path.join(dir, 'cgroup.procs')],
      breach: () => {
        if (keyed(read(path.join(dir, 'memory.events')), 'oom_kill') > 0) return words.memory(limits);
        if (keyed(read(path.join(dir, 'pids.events')), 'max') > 0) return words.pids(limits);
        if (keyed(read(path.join(dir, 'cpu.stat')), 'usage_usec') >= limits.cpuSeconds * 1e6) return words.cpu(limits);
        return undefined;
      },
      dispose: () => removeGroup(dir),
    };
  }

  /** A subtree of the node's own v2 group with memory, pids and cpu for its sandboxes; throws why there is none. */
  static open(own: string, tag: string): V2 {
    const mine = path.join(CGROUP_ROOT, own);
    const needed = ['memory', 'pids', 'cpu'];
    const available = read(path.join(mine, 'cgroup.controllers')).trim().split(/\s+/);
    const missing = needed.filter((c) => !available.includes(c));
    if (missing.length) throw new Error(`the node's cgroup ${own} has no ${missing.join(', ')} controller`);
    const enable = (dir: string) =>
      fs.writeFileSync(path.join(dir, 'cgroup.subtree_control'), needed.map((c) => `+${c}`).join(' '));
    try {
      enable(mine);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EBUSY') throw err;
      // v2 gives controllers only to groups without processes of their own: the node's move to a leaf beside.
      const leaf = path.join(mine, 'oz0-main');
      fs.mkdirSync(leaf, { recursive: true });
      for (const pid of read(path.join(mine, 'cgroup.procs')).split('\n').filter(Boolean)) {
        try {
          fs.writeFileSync(path.join(leaf, 'cgroup.procs'), pid);
        } catch {
          // a process that ended meanwhile, or a kernel thread
        }
      }
      enable(mine);
    }
    const base = path.join(mine, `oz0-${tag}`);
    fs.mkdirSync(base, { recursive: true });
    enable(base);
    return new V2(base);
  }
}

class V1 implements LimitsBackend {
  readonly kind = 'cgroup v1';
  readonly gaps: string[] = [];
  /** Each controller's folder for this node's sandboxes. */
  constructor(private readonly bases: Record<'memory' | 'pids' | 'cpuacct', string>) {}

  async close(): Promise<void> {
    await Promise.all(Object.values(this.bases).map(removeGroup));
  }

  create(id: string, limits: Limits): LimitsHandle {
    const dirs = {
      memory: path.join(this.bases.memory, id),
      pids: path.join(this.bases.pids, id),
      cpuacct: path.join(this.bases.cpuacct, id),
    };
    for (const dir of Object.values(dirs)) fs.mkdirSync(dir);
    const bytes = String(limits.memoryMiB * 1024 * 1024);
    fs.writeFileSync(path.join(dirs.memory, 'memory.limit_in_bytes'), bytes);
    // With swap accounting on, the limit holds for memory and swap together.
    if (fs.existsSync(path.join(dirs.memory, 'memory.memsw.limit_in_bytes'))) {
      fs.writeFileSync(path.join(dirs.memory, 'memory.memsw.limit_in_bytes'), bytes);
    }
    fs.writeFileSync(path.join(dirs.pids, 'pids.max'), String(limits.pids));
    return {
      prefix: [
        '/bin/sh',
        '-c',
        JOIN,
        'oz0-limits',
        '3',
        ...Object.values(dirs).map((dir) => path.join(dir, 'cgroup.procs')),
      ],
      breach: () => {
        if (keyed(read(path.join(dirs.memory, 'memory.oom_control')), 'oom_kill') > 0) return words.memory(limits);
        if (keyed(read(path.join(dirs.pids, 'pids.events')), 'max') > 0) return words.pids(limits);
        if (Number(read(path.join(dirs.cpuacct, 'cpuacct.usage')) || 0) >= limits.cpuSeconds * 1e9) {
          return words.cpu(limits);
        }
        return undefined;
      },
      dispose: async () => {
        await Promise.all(Object.values(dirs).map(removeGroup));
      },
    };
  }

  static open(own: Map<string, string>, tag: string): V1 {
    const bases = {} as Record<'memory' | 'pids' | 'cpuacct', string>;
    for (const controller of ['memory', 'pids', 'cpuacct'] as const) {
      const where = own.get(controller);
      const mount = path.join(CGROUP_ROOT, controller);
      if (where === undefined || !fs.existsSync(path.join(mount, 'cgroup.procs'))) {
        throw new Error(`no cgroup v1 ${controller} controller at ${mount}`);
      }
      bases[controller] = path.join(mount, where, `oz0-${tag}`);
      fs.mkdirSync(bases[controller], { recursive: true });
    }
    return new V1(bases);
  }
}

/** Per-process limits, where the node may not make control groups: CPU seconds and data size, each process on its own. */
class Rlimits implements LimitsBackend {
  readonly kind = 'rlimit';
  constructor(readonly gaps: string[]) {}

  async close(): Promise<void> {}

  create(_id: string, limits: Limits): LimitsHandle {
    return {
      prefix: ['prlimit', `--cpu=${Math.ceil(limits.cpuSeconds)}`, `--data=${limits.memoryMiB * 1024 * 1024}`, '--'],
      // SIGXCPU (24) is the kernel's word for a process past its CPU seconds; bwrap passes it on as 128 + 24.
      breach: (exit) => (exit?.code === 128 + 24 ? words.cpu(limits) : undefined),
      dispose: async () => undefined,
    };
  }
}

/**
 * The best backend this node may use: its own cgroup v2 subtree, else cgroup v1, else per-process limits. `tag`
 * names this node's folder of groups (removed by {@link removeStaleGroups} once its node is gone).
 */
export function detectLimits(tag: string): LimitsBackend {
  const own = ownGroups(read('/proc/self/cgroup'));
  const why: string[] = [];
  if (fs.existsSync(path.join(CGROUP_ROOT, 'cgroup.controllers')) && own.has('0')) {
    try {
      return V2.open(own.get('0')!, tag);
    } catch (err) {
      why.push(`cgroup v2: ${(err as Error).message}`);
    }
  } else {
    try {
      return V1.open(own, tag);
    } catch (err) {
      why.push(`cgroup v1: ${(err as Error).message}`);
    }
  }
  return new Rlimits([
    `memory and processes are limited per process, not per sandbox, and a sandbox past them is not named (${why.join('; ')})`,
  ]);
}

/** Folders of groups that nodes no longer running left behind (a node killed outright cannot remove its own). */
export function removeStaleGroups(alive: (pid: number) => boolean): void {
  const own = ownGroups(read('/proc/self/cgroup'));
  const parents = [
    ...(own.has('0') ? [path.join(CGROUP_ROOT, own.get('0')!)] : []),
    ...['memory', 'pids', 'cpuacct'].flatMap((c) => (own.has(c) ? [path.join(CGROUP_ROOT, c, own.get(c)!)] : [])),
  ];
  for (const parent of parents) {
    let entries: string[] = [];
    try {
      entries = fs.readdirSync(parent);
    } catch {
      continue;
    }
    for (const name of entries) {
      const pid = /^oz0-node-(\d+)-\d+$/.exec(name)?.[1];
      if (!pid || alive(Number(pid))) continue;
      const dir = path.join(parent, name);
      for (const child of fs.readdirSync(dir, { withFileTypes: true })) {
        if (child.isDirectory()) void removeGroup(path.join(dir, child.name));
      }
      void removeGroup(dir);
    }
  }
}
