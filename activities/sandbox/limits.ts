/**
 * A sandbox's limits (I4): memory, processes, CPU time and CPU share of the whole sandbox, in a control group of its
 * own, which the node watches: past a limit the sandbox is stopped and the attempt says which. A cgroup v2 tree (a
 * delegated subtree, or the node as root) or the v1 controllers memory, pids, cpuacct and cpu; where the node may
 * create neither, resource limits (RLIMIT_NPROC for one sandbox's processes, CPU seconds and data per process), its
 * processes pinned to whole cores, and the node's own reads of /proc (./census.ts). What each mode cannot hold is in
 * ./holds.ts. Disk is the same in every mode (./disk.ts): each file is bounded here by RLIMIT_FSIZE.
 *
 * The mode is the best the node may use, or the one `node.limitsBy` / `OZ0_LIMITS` names (`cgroup2`, `cgroup1`,
 * `rlimit`): a node told a mode it cannot use refuses sandboxes, saying why.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { SandboxConfig } from '../../common/config';
import { resolveCommand } from '../../common/process-group';
import { tmpfsBytes, treeUsage } from './census';

export type Limits = Pick<SandboxConfig, 'memoryMiB' | 'pids' | 'cpuSeconds' | 'cpus' | 'diskMiB'>;
export type LimitsMode = 'cgroup2' | 'cgroup1' | 'rlimit';

/** One sandbox's limits while it runs. */
export interface LimitsHandle {
  /** Put before the sandbox's bwrap: it enters the limits, then execs the rest. */
  readonly prefix: string[];
  /** Put inside, after the sandbox dropped to its user, before its program (resource limits of its own). */
  readonly inside: string[];
  /** The limit it went past, in words with its setting's name; undefined while within them all. `pid`: its bwrap. */
  breach(pid: number | undefined, exit?: { code: number | null }): string | undefined;
  /** Removes what the limits left once the sandbox is gone. */
  dispose(): Promise<void>;
}

export interface LimitsBackend {
  readonly kind: 'cgroup v2' | 'cgroup v1' | 'rlimit';
  /** How a sandbox's CPU share is held: its group's quota, or pinned to whole cores. */
  readonly cpuShare: 'quota' | 'cores';
  /** Why the node could not use a control group (empty when it does). */
  readonly why: string[];
  create(id: string, limits: Limits): LimitsHandle;
  /** Removes this node's folder of groups (once its sandboxes are gone). */
  close(): Promise<void>;
}

const CGROUP_ROOT = '/sys/fs/cgroup';
/** The CFS period a CPU share is a quota of, in µs (the kernel's default). */
const PERIOD_US = 100_000;
/** SIGXCPU and SIGXFSZ: how the kernel stops a process past its CPU seconds or its file size; bwrap exits 128 + it. */
const SIGXCPU = 24;
const SIGXFSZ = 25;

export const words = {
  memory: (l: Limits) => `its memory limit of ${l.memoryMiB} MiB (sandbox.memoryMiB)`,
  pids: (l: Limits) => `its limit of ${l.pids} processes (sandbox.pids)`,
  cpu: (l: Limits) => `its CPU time of ${l.cpuSeconds} s (sandbox.cpuSeconds)`,
  disk: (l: Limits) => `its disk limit of ${l.diskMiB} MiB (sandbox.diskMiB)`,
};

const bytes = (mib: number) => mib * 1024 * 1024;

/** A limit the kernel signals with the exit code of the sandbox's program, the same in every mode. */
function signalled(limits: Limits, exit?: { code: number | null }): string | undefined {
  if (exit?.code === 128 + SIGXCPU) return words.cpu(limits);
  if (exit?.code === 128 + SIGXFSZ) return words.disk(limits);
  return undefined;
}

/**
 * Enters every file's control group (writing its own pid in each), bounds each file it writes (ulimit -f, in 512-byte
 * blocks), then becomes the sandbox's command.
 */
const JOIN =
  'n=$1; f=$2; shift 2; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n-1)); done; ulimit -f "$f" || exit 125; exec "$@"';

function joinPrefix(procs: string[], limits: Limits): string[] {
  return ['/bin/sh', '-c', JOIN, 'oz0-limits', String(procs.length), String(bytes(limits.diskMiB) / 512), ...procs];
}

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

/** `cpu.max` (v2): a quota of `cpus` periods in each period. */
export function cpuMax(cpus: number): string {
  return `${Math.max(1000, Math.round(cpus * PERIOD_US))} ${PERIOD_US}`;
}

class V2 implements LimitsBackend {
  readonly kind = 'cgroup v2';
  readonly cpuShare = 'quota';
  readonly why: string[] = [];
  constructor(private readonly base: string) {}

  close(): Promise<void> {
    return removeGroup(this.base);
  }

  create(id: string, limits: Limits): LimitsHandle {
    const dir = path.join(this.base, id);
    fs.mkdirSync(dir);
    const set = (file: string, value: string) => fs.writeFileSync(path.join(dir, file), value);
    set('memory.max', String(bytes(limits.memoryMiB)));
    if (fs.existsSync(path.join(dir, 'memory.swap.max'))) set('memory.swap.max', '0');
    // One process past the memory limit takes the whole sandbox with it.
    set('memory.oom.group', '1');
    set('pids.max', String(limits.pids));
    set('cpu.max', cpuMax(limits.cpus));
    return {
      prefix: joinPrefix([path.join(dir, 'cgroup.procs')], limits),
      inside: [],
      breach: (_pid, exit) => {
        if (keyed(read(path.join(dir, 'memory.events')), 'oom_kill') > 0) return words.memory(limits);
        if (keyed(read(path.join(dir, 'pids.events')), 'max') > 0) return words.pids(limits);
        if (keyed(read(path.join(dir, 'cpu.stat')), 'usage_usec') >= limits.cpuSeconds * 1e6) return words.cpu(limits);
        return signalled(limits, exit);
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

type V1Controller = 'memory' | 'pids' | 'cpuacct' | 'cpu';

class V1 implements LimitsBackend {
  readonly kind = 'cgroup v1';
  readonly why: string[] = [];
  readonly cpuShare: 'quota' | 'cores';
  /** Each controller's folder for this node's sandboxes (`cpu` where that controller is mounted). */
  constructor(private readonly bases: Partial<Record<V1Controller, string>>) {
    this.cpuShare = bases.cpu ? 'quota' : 'cores';
  }

  async close(): Promise<void> {
    await Promise.all(distinct(Object.values(this.bases)).map(removeGroup));
  }

  create(id: string, limits: Limits): LimitsHandle {
    const dirs = Object.fromEntries(Object.entries(this.bases).map(([c, base]) => [c, path.join(base, id)])) as Partial<
      Record<V1Controller, string>
    >;
    const made = distinct(Object.values(dirs));
    for (const dir of made) fs.mkdirSync(dir);
    const memory = dirs.memory!;
    const pids = dirs.pids!;
    const cpuacct = dirs.cpuacct!;
    fs.writeFileSync(path.join(memory, 'memory.limit_in_bytes'), String(bytes(limits.memoryMiB)));
    // With swap accounting on, the limit holds for memory and swap together.
    if (fs.existsSync(path.join(memory, 'memory.memsw.limit_in_bytes'))) {
      fs.writeFileSync(path.join(memory, 'memory.memsw.limit_in_bytes'), String(bytes(limits.memoryMiB)));
    }
    fs.writeFileSync(path.join(pids, 'pids.max'), String(limits.pids));
    if (dirs.cpu) {
      fs.writeFileSync(path.join(dirs.cpu, 'cpu.cfs_period_us'), String(PERIOD_US));
      fs.writeFileSync(
        path.join(dirs.cpu, 'cpu.cfs_quota_us'),
        String(Math.max(1000, Math.round(limits.cpus * PERIOD_US))),
      );
    }
    const pinned = this.cpuShare === 'cores' ? pinCores(limits.cpus) : undefined;
    return {
      prefix: [
        ...(pinned?.prefix ?? []),
        ...joinPrefix(
          made.map((dir) => path.join(dir, 'cgroup.procs')),
          limits,
        ),
      ],
      inside: [],
      breach: (_pid, exit) => {
        if (keyed(read(path.join(memory, 'memory.oom_control')), 'oom_kill') > 0) return words.memory(limits);
        if (keyed(read(path.join(pids, 'pids.events')), 'max') > 0) return words.pids(limits);
        if (Number(read(path.join(cpuacct, 'cpuacct.usage')) || 0) >= limits.cpuSeconds * 1e9) {
          return words.cpu(limits);
        }
        return signalled(limits, exit);
      },
      dispose: async () => {
        pinned?.release();
        await Promise.all(made.map(removeGroup));
      },
    };
  }

  static open(own: Map<string, string>, tag: string): V1 {
    const bases: Partial<Record<V1Controller, string>> = {};
    for (const controller of ['memory', 'pids', 'cpuacct', 'cpu'] as const) {
      const where = own.get(controller);
      const mount = path.join(CGROUP_ROOT, controller);
      if (where === undefined || !fs.existsSync(path.join(mount, 'cgroup.procs'))) {
        // The CPU share falls back to whole cores (./holds.ts says what that holds); the rest are needed.
        if (controller === 'cpu') continue;
        throw new Error(`no cgroup v1 ${controller} controller at ${mount}`);
      }
      // cpu and cpuacct are often one hierarchy (`cpu,cpuacct`, each name a link to it): one folder for both.
      bases[controller] = path.join(fs.realpathSync(mount), where, `oz0-${tag}`);
      fs.mkdirSync(bases[controller], { recursive: true });
    }
    return new V1(bases);
  }
}

function distinct(dirs: Array<string | undefined>): string[] {
  return [...new Set(dirs.filter((d): d is string => d !== undefined))];
}

/** Cores this node pinned sandboxes to, and how many on each: a new one takes the least busy. */
const pinnedCores = new Map<number, number>();

/** The cores this process may run on (its cpuset), from /proc/self/status. */
export function allowedCores(status = read('/proc/self/status')): number[] {
  const list = /^Cpus_allowed_list:\s*(.*)$/m.exec(status)?.[1] ?? '';
  const cores: number[] = [];
  for (const part of list.split(',').filter(Boolean)) {
    const [a, b = a] = part.split('-').map(Number);
    for (let c = a; c <= b; c++) cores.push(c);
  }
  return cores;
}

/**
 * Pins a sandbox to `ceil(cpus)` whole cores with `taskset` (before its filter, which refuses `sched_setaffinity`
 * inside): none when that is every core the node has.
 */
function pinCores(cpus: number): { prefix: string[]; release(): void } | undefined {
  const cores = allowedCores();
  const want = Math.ceil(cpus);
  if (want >= cores.length) return undefined;
  const chosen = [...cores].sort((a, b) => (pinnedCores.get(a) ?? 0) - (pinnedCores.get(b) ?? 0)).slice(0, want);
  for (const c of chosen) pinnedCores.set(c, (pinnedCores.get(c) ?? 0) + 1);
  let released = false;
  return {
    prefix: ['taskset', '-c', chosen.join(',')],
    release: () => {
      if (released) return;
      released = true;
      for (const c of chosen) pinnedCores.set(c, (pinnedCores.get(c) ?? 1) - 1);
    },
  };
}

/**
 * Where the node may not make control groups: RLIMIT_NPROC for its processes (set inside, once the sandbox has its
 * own uid or user namespace, so it counts that sandbox alone), CPU seconds, data and file size per process, pinned to
 * whole cores, and the node's reads of /proc for the sums (./census.ts; ./holds.ts says what they cannot hold).
 */
class Rlimits implements LimitsBackend {
  readonly kind = 'rlimit';
  readonly cpuShare = 'cores';
  constructor(readonly why: string[]) {}

  async close(): Promise<void> {}

  create(_id: string, limits: Limits): LimitsHandle {
    const pinned = pinCores(limits.cpus);
    return {
      prefix: pinned?.prefix ?? [],
      inside: [
        // The node's own prlimit, as the node found it: a sandbox's PATH is its config's to say.
        resolveCommand('prlimit'),
        `--nproc=${limits.pids}`,
        `--cpu=${Math.ceil(limits.cpuSeconds)}`,
        `--data=${bytes(limits.memoryMiB)}`,
        `--fsize=${bytes(limits.diskMiB)}`,
        '--',
      ],
      breach: (pid, exit) => {
        const kernel = signalled(limits, exit);
        if (kernel || pid === undefined) return kernel;
        const used = treeUsage(pid);
        if (used.tasks >= limits.pids) return words.pids(limits);
        if (used.cpuSeconds >= limits.cpuSeconds) return words.cpu(limits);
        // Its tmpfs pages are memory too: what its /dev/shm and its /tmp hold.
        const shm = tmpfsBytes(used.init, '/dev/shm') + tmpfsBytes(used.init, '/tmp');
        if (used.residentBytes + shm >= bytes(limits.memoryMiB)) return words.memory(limits);
        return undefined;
      },
      dispose: async () => pinned?.release(),
    };
  }
}

/** `OZ0_LIMITS` or `node.limitsBy`: a mode the node must use, or `auto`. */
export type LimitsChoice = LimitsMode | 'auto';

/**
 * The backend this node uses: the mode it was told, or the best it may use — its own cgroup v2 subtree, else cgroup
 * v1, else resource limits. Throws when the mode it was told cannot be used here. `tag` names this node's folder of
 * groups (removed by {@link removeStaleGroups} once its node is gone).
 */
export function detectLimits(tag: string, choice: LimitsChoice = 'auto'): LimitsBackend {
  const own = ownGroups(read('/proc/self/cgroup'));
  const unified = fs.existsSync(path.join(CGROUP_ROOT, 'cgroup.controllers'));
  const tries: Array<[LimitsMode, () => LimitsBackend]> = [
    ['cgroup2', () => V2.open(own.get('0') ?? '/', tag)],
    ['cgroup1', () => V1.open(own, tag)],
  ];
  if (choice === 'rlimit') return new Rlimits([]);
  const why: string[] = [];
  for (const [mode, open] of tries) {
    if (choice !== 'auto' && choice !== mode) continue;
    // Left to itself, a node takes v2 on a unified hierarchy and v1 on a hybrid or legacy one.
    if (choice === 'auto' && (mode === 'cgroup2') !== (unified && own.has('0'))) continue;
    try {
      return open();
    } catch (err) {
      if (choice !== 'auto')
        throw new Error(`limits by ${mode} were asked for, and cannot be had here: ${(err as Error).message}`);
      why.push(`${mode === 'cgroup2' ? 'cgroup v2' : 'cgroup v1'}: ${(err as Error).message}`);
    }
  }
  return new Rlimits(why);
}

/**
 * Folders of groups that nodes no longer running left behind (a node killed outright cannot remove its own). Every
 * node starting sweeps, and nodes start side by side: a folder another node removed first is simply passed over.
 */
export function removeStaleGroups(alive: (pid: number) => boolean, parents = groupParents()): void {
  for (const parent of parents) {
    for (const entry of subfolders(parent)) {
      const pid = /^oz0-node-(\d+)-\d+$/.exec(entry)?.[1];
      if (!pid || alive(Number(pid))) continue;
      const dir = path.join(parent, entry);
      for (const child of subfolders(dir)) void removeGroup(path.join(dir, child));
      void removeGroup(dir);
    }
  }
}

/** Where this node's groups are made: its own group in each hierarchy it is in. */
function groupParents(): string[] {
  const own = ownGroups(read('/proc/self/cgroup'));
  return distinct([
    ...(own.has('0') ? [path.join(CGROUP_ROOT, own.get('0')!)] : []),
    ...['memory', 'pids', 'cpuacct', 'cpu'].flatMap((c) => {
      if (!own.has(c)) return [];
      try {
        return [path.join(fs.realpathSync(path.join(CGROUP_ROOT, c)), own.get(c)!)];
      } catch {
        return [];
      }
    }),
  ]);
}

/** The folders in `dir`; none when it cannot be read (gone: another node's sweep took it first). */
function subfolders(dir: string): string[] {
  try {
    return fs
      .readdirSync(dir, { withFileTypes: true })
      .filter((e) => e.isDirectory())
      .map((e) => e.name);
  } catch {
    return [];
  }
}
