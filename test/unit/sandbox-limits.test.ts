/**
 * The system-call filter (SPEC I1) and the limits (I4) of a sandbox, as pure rules: Docker's profile as the filter
 * reads it, what each mode of limits holds, how bubblewrap's command line carries them, and the readings of /proc and
 * of a folder the node stops a sandbox on. libseccomp compiles the filter for real here, and two lease holders take
 * uids from one range through real flock; test/integration/limits.test.ts tries them all on hostile programs.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MAX_DEPTH, MIN_ENTRY_BYTES, diskBytes, handedBytes, treeBytes } from '../../activities/sandbox/disk';
import { nextWalkMs } from '../../activities/sandbox/watch';
import { nodeGaps, sandboxGaps } from '../../activities/sandbox/holds';
import type { NodeLimits } from '../../activities/sandbox/holds';
import { parseStat, statusBytes, tmpfsBytes } from '../../activities/sandbox/census';
import { allowedCores, cpuMax, removeStaleGroups } from '../../activities/sandbox/limits';
import { bwrapArgs } from '../../activities/sandbox/plan';
import type { PathKind, SandboxPlan } from '../../activities/sandbox/plan';
import { REFUSED_BEYOND_DOCKER, compile, profileRules, sandboxFilterPlan } from '../../activities/sandbox/seccomp';
import type { FilterRule, SeccompProfile } from '../../activities/sandbox/seccomp';
import dockerProfile from '../../activities/sandbox/docker-seccomp.json';
import { UidLeases } from '../../activities/sandbox/uids';
import { ROOT } from '../helpers/temporal';

const profile = dockerProfile as SeccompProfile;
const amd64 = profileRules(profile, { arch: 'x64', kernel: '6.1.0-18-amd64' });
const allowed = (rules: FilterRule[], name: string) => rules.filter((r) => r.name === name && r.action === 'allow');

describe('I1: the system-call filter, from Docker’s default profile', () => {
  test.each([
    'unshare',
    'setns',
    'mount',
    'umount2',
    'pivot_root',
    'keyctl',
    'add_key',
    'request_key',
    'bpf',
    'perf_event_open',
    'userfaultfd',
    'io_uring_setup',
    'io_uring_enter',
    'io_uring_register',
    'kexec_load',
    'kexec_file_load',
    'init_module',
    'finit_module',
    'delete_module',
    'open_by_handle_at',
    'fsopen',
    'move_mount',
    'acct',
    'reboot',
    'swapon',
    'chroot',
  ])('%s is refused: no rule allows it, so it gets the default EPERM', (name) => {
    expect(allowed(amd64.rules, name)).toEqual([]);
    expect(amd64.defaultErrno).toBe(1);
  });

  test('beyond Docker: ptrace, process_vm_readv/writev and sched_setaffinity are refused; with nothing beyond, Docker allows them from kernel 4.8 (the control)', () => {
    for (const name of REFUSED_BEYOND_DOCKER) expect(allowed(amd64.rules, name)).toEqual([]);
    const docker = profileRules(profile, { arch: 'x64', kernel: '6.1.0', refused: [] });
    for (const name of REFUSED_BEYOND_DOCKER) expect(allowed(docker.rules, name)).toHaveLength(1);
    const old = profileRules(profile, { arch: 'x64', kernel: '4.4.0', refused: [] });
    expect(allowed(old.rules, 'ptrace')).toEqual([]);
  });

  test('clone only without a namespace flag, clone3 answers ENOSYS (glibc then falls back to clone)', () => {
    // CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET = 0x7e020000.
    expect(allowed(amd64.rules, 'clone')).toEqual([
      { name: 'clone', action: 'allow', args: [{ arg: 0, op: 'MASKED_EQ', a: 0x7e020000, b: 0 }] },
    ]);
    expect(amd64.rules.filter((r) => r.name === 'clone3')).toEqual([{ name: 'clone3', action: { errno: 38 } }]);
  });

  test('what a program needs is allowed: files, processes, threads, sockets but AF_ALG and AF_VSOCK', () => {
    for (const name of ['read', 'openat', 'execve', 'fork', 'vfork', 'wait4', 'futex', 'epoll_wait', 'setresuid']) {
      expect([name, allowed(amd64.rules, name).length]).toEqual([name, 1]);
    }
    expect(allowed(amd64.rules, 'socket').map((r) => r.args)).toEqual([
      [{ arg: 0, op: 'LT', a: 38, b: 0 }],
      [{ arg: 0, op: 'EQ', a: 39, b: 0 }],
      [{ arg: 0, op: 'GT', a: 40, b: 0 }],
    ]);
  });

  test('architecture rules: arch_prctl on x86-64 only', () => {
    expect(allowed(amd64.rules, 'arch_prctl')).toHaveLength(1);
    const arm64 = profileRules(profile, { arch: 'arm64', kernel: '6.1.0' });
    expect(allowed(arm64.rules, 'arch_prctl')).toEqual([]);
    expect(allowed(arm64.rules, 'set_tls')).toHaveLength(1);
  });

  test('libseccomp compiles this machine’s filter into a BPF program bwrap takes (at most 4,096 instructions)', () => {
    const built = compile(sandboxFilterPlan());
    expect(built.libseccomp).toMatch(/^2\.\d+\.\d+$/);
    expect(built.bpf.length % 8).toBe(0);
    expect(built.bpf.length / 8).toBeLessThanOrEqual(4096);
    expect(built.newestKnown).toBeGreaterThan(400);
    expect(built.rules).toBeGreaterThan(300);
  });
});

/** A plan of a sandbox on a merged-/usr system. */
const plan = (over: Partial<SandboxPlan> = {}): SandboxPlan => ({
  command: '/usr/bin/node',
  args: [],
  cwd: '/var/lib/oz0/sandboxes/q/box',
  read: [],
  write: [],
  hidden: [],
  network: 'none',
  ...over,
});
const probe = (p: string): PathKind =>
  ['/usr', '/etc'].includes(p)
    ? { kind: 'dir' }
    : p === '/bin'
      ? { kind: 'symlink', target: 'usr/bin' }
      : { kind: 'missing' };

describe('I1, I4: what bubblewrap’s command line carries', () => {
  test('the filter on its descriptor, an /etc/passwd that names its user (0644), sized /tmp and /dev/shm, and its own limits once it dropped to its user', () => {
    const args = bwrapArgs(
      plan({
        dropTo: { uid: 1879048192, gid: 65534, setpriv: '/usr/bin/setpriv' },
        seccompFd: 3,
        passwdFd: 4,
        tmpBytes: 64 << 20,
        shmBytes: 128 << 20,
        inside: ['prlimit', '--nproc=64', '--'],
      }),
      probe,
    );
    const line = args.join(' ');
    expect(line).toContain('--ro-bind /etc /etc --perms 0644 --ro-bind-data 4 /etc/passwd');
    expect(line).toContain(
      '--dev /dev --perms 1777 --size 134217728 --tmpfs /dev/shm --perms 1777 --size 67108864 --tmpfs /tmp',
    );
    expect(line).toMatch(
      /--seccomp 3 --chdir \S+ -- \/usr\/bin\/setpriv --reuid=1879048192 --regid=65534 .* -- prlimit --nproc=64 -- \/usr\/bin\/node$/,
    );
  });

  test('without sizes (bubblewrap before 0.10) /tmp is a plain tmpfs and /dev/shm is /dev’s', () => {
    const line = bwrapArgs(plan({ seccompFd: 3 }), probe).join(' ');
    expect(line).toContain('--dev /dev --perms 1777 --tmpfs /tmp');
    expect(line).not.toContain('--size');
    expect(line).not.toContain('/etc/passwd');
  });
});

const rlimitNode: NodeLimits = { kind: 'rlimit', cpuShare: 'cores', ownUid: true, kernel: '6.1.0' };
const grants = { cpus: 1, write: [] as string[] };

describe('I4: what each mode holds', () => {
  test.each<[string, NodeLimits, { cpus: number; write: string[] }, RegExp[]]>([
    [
      'cgroup v1 with its cpu controller: everything',
      { ...rlimitNode, kind: 'cgroup v1', cpuShare: 'quota' },
      { cpus: 0.5, write: ['/srv/out'] },
      [],
    ],
    ['cgroup v2: everything', { ...rlimitNode, kind: 'cgroup v2', cpuShare: 'quota' }, grants, []],
    ['rlimit: not memory, not CPU time', rlimitNode, grants, [/^memory: /, /^CPU time: /]],
    [
      'cgroup v1 without its cpu controller, half a core: whole cores only',
      { ...rlimitNode, kind: 'cgroup v1' },
      { cpus: 0.5, write: [] },
      [/^CPU share: sandbox.cpus is 0.5/],
    ],
    [
      'not root, with a write grant: the grant’s files are not its own',
      { ...rlimitNode, kind: 'cgroup v2', cpuShare: 'quota', ownUid: false },
      { cpus: 1, write: ['/srv/out'] },
      [/^disk: what it writes in its write grants/],
    ],
    [
      'not root, Linux 5.10, rlimit: processes counted with the node’s',
      { ...rlimitNode, ownUid: false, kernel: '5.10.0-28-amd64' },
      grants,
      [/^memory/, /^CPU time/, /^processes: Linux 5.10.0-28-amd64/],
    ],
    [
      'not root, Linux 5.14: processes per user namespace',
      { ...rlimitNode, ownUid: false, kernel: '5.14.0' },
      grants,
      [/^memory/, /^CPU time/],
    ],
  ])('%s', (_what, node, limits, gaps) => {
    const found = sandboxGaps(node, limits);
    expect(found).toHaveLength(gaps.length);
    gaps.forEach((gap, i) => expect(found[i]).toMatch(gap));
    expect(nodeGaps(node).every((g) => found.includes(g))).toBe(true);
  });

  test('a CPU share: cpu.max in periods of 100 ms; the cores a process may run on', () => {
    expect(cpuMax(1)).toBe('100000 100000');
    expect(cpuMax(0.5)).toBe('50000 100000');
    expect(cpuMax(2.25)).toBe('225000 100000');
    expect(allowedCores('Name:\tnode\nCpus_allowed_list:\t0-2,5,7-8\n')).toEqual([0, 1, 2, 5, 7, 8]);
  });
});

describe('I4: the node’s readings', () => {
  test('/proc/<pid>/stat: parent, CPU ticks of its own and its reaped children, threads; a name with “) (” in it', () => {
    const stat = '4242 (evil) (name) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 7 0 123 456 78';
    expect(parseStat(stat)).toEqual({ ppid: 17, ticks: 350, threads: 7 });
    expect(statusBytes('Name:\tx\nRssAnon:\t  2048 kB\nRssShmem:\t 0 kB\n', 'RssAnon')).toBe(2048 * 1024);
  });

  test('a folder’s disk: each entry at least 4 KiB, a big file by its blocks, only an owner’s when asked, and a walk that stops once past', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-disk-'));
    try {
      for (let i = 0; i < 10; i++) fs.writeFileSync(path.join(dir, `empty-${i}`), '');
      fs.mkdirSync(path.join(dir, 'sub'));
      fs.writeFileSync(path.join(dir, 'sub', 'big'), Buffer.alloc(1 << 20, 1));
      const all = await treeBytes(dir, { stopAt: Infinity });
      // The folder, 10 empty files and a subfolder at 4 KiB each, and 1 MiB of blocks.
      expect(all).toBeGreaterThanOrEqual(12 * MIN_ENTRY_BYTES + (1 << 20));
      expect(all).toBeLessThan(12 * MIN_ENTRY_BYTES + (1 << 20) + 64 * 1024);
      expect(await treeBytes(dir, { uid: 4_000_000_000, stopAt: Infinity })).toBe(0);
      expect(await treeBytes(dir, { uid: process.getuid!(), stopAt: Infinity })).toBe(all);
      expect(await treeBytes(dir, { stopAt: 2 * MIN_ENTRY_BYTES })).toBeLessThan(all);
      // What the walk cost: the folder, its 11 entries and the subfolder's file.
      expect(await diskBytes({ folder: dir, grants: [] }, Infinity)).toEqual({ bytes: all, entries: 13 });
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  (process.getuid?.() === 0 ? test : test.skip)(
    'I12: in a write grant, its own files count, and what handed-over files grew by since it started; another live sandbox’s files count against that one',
    async () => {
      const top = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-disk-'));
      const [folder, grant] = [path.join(top, 'own'), path.join(top, 'grant')];
      fs.mkdirSync(folder);
      fs.mkdirSync(grant);
      const range = { first: 1_879_000_000, count: 1000 };
      const [uid, other] = [range.first + 1, range.first + 2];
      const MiB = (n: number) => Buffer.alloc(n << 20, 1);
      fs.writeFileSync(path.join(grant, 'handed'), MiB(1));
      const atStart = await handedBytes([grant], range);
      const scope = { folder, grants: [grant], uid, sandboxUids: range, handedAtStart: atStart };
      const base = (await diskBytes(scope, Infinity)).bytes;
      // The handed-over file grows by 4 MiB; another sandbox writes 8 MiB of its own; this one 2 MiB.
      fs.appendFileSync(path.join(grant, 'handed'), MiB(4));
      fs.writeFileSync(path.join(grant, 'others'), MiB(8));
      fs.chownSync(path.join(grant, 'others'), other, -1);
      fs.writeFileSync(path.join(grant, 'mine'), MiB(2));
      fs.chownSync(path.join(grant, 'mine'), uid, -1);
      const now = (await diskBytes(scope, Infinity)).bytes;
      expect(now - base).toBeGreaterThanOrEqual(6 << 20);
      expect(now - base).toBeLessThan(7 << 20);
      // The control: without the reading at its start (as before), the handed-over file's growth was nobody's.
      const before = (await diskBytes({ ...scope, handedAtStart: undefined }, Infinity)).bytes;
      expect(now - before).toBeGreaterThanOrEqual(4 << 20);
      // A handed-over file cut shorter frees room: growth never counts below nothing.
      fs.truncateSync(path.join(grant, 'handed'), 0);
      expect((await diskBytes(scope, Infinity)).bytes - base).toBeLessThan(3 << 20);
      fs.rmSync(top, { recursive: true, force: true });
    },
  );

  test('a tree deeper than a walk goes counts as past any limit; one as deep as it goes is counted (the control)', async () => {
    const top = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-disk-'));
    const deep = (n: number, name: string) => {
      // Made from inside, a level at a time: a path this long is past what one call takes.
      let fd = fs.openSync(top, fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
      fs.mkdirSync(`/proc/self/fd/${fd}/${name}`);
      for (let i = 1; i < n; i++) {
        const next = fs.openSync(`/proc/self/fd/${fd}/${i === 1 ? name : 'd'}`, fs.constants.O_RDONLY);
        fs.closeSync(fd);
        fd = next;
        fs.mkdirSync(`/proc/self/fd/${fd}/d`);
      }
      fs.closeSync(fd);
      return path.join(top, name);
    };
    try {
      expect(await treeBytes(deep(MAX_DEPTH, 'ok'), { stopAt: 1 << 30 })).toBe(MAX_DEPTH * MIN_ENTRY_BYTES);
      expect(await treeBytes(deep(MAX_DEPTH + 1, 'over'), { stopAt: 1 << 30 })).toBe(Number.POSITIVE_INFINITY);
    } finally {
      fs.rmSync(top, { recursive: true, force: true });
    }
  });

  test('the next disk walk: 250 ms at least, 20 times the last one’s time, but a walk slowed by the rest of the node counts a millisecond an entry at most', () => {
    // A walk of 8 files that the node's other work held up for 150 ms (the fresh clone's CI): read again in 250 ms,
    // not 3 s, in which a filler wrote 224 MiB past a 32 MiB limit.
    expect(nextWalkMs(150, 8)).toBe(250);
    expect(nextWalkMs(150, 0)).toBe(250);
    // A quick one: the floor.
    expect(nextWalkMs(2, 8)).toBe(250);
    // A sandbox of 100,000 entries whose walk really took 3 s: still a twentieth of the node's time (the control).
    expect(nextWalkMs(3000, 100_000)).toBe(60_000);
    // Between: 1,000 entries that took 40 ms of their own, and the same walk stalled to 5 s.
    expect(nextWalkMs(40, 1000)).toBe(800);
    expect(nextWalkMs(5000, 1000)).toBe(20_000);
  });

  test('a folder the sandbox removes while the walk is under way is passed over, not taken as past the limit', async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-disk-'));
    const gone = path.join(dir, 'gone');
    fs.mkdirSync(path.join(gone, 'deeper'), { recursive: true });
    fs.mkdirSync(path.join(dir, 'kept'));
    fs.writeFileSync(path.join(dir, 'kept', 'file'), Buffer.alloc(64 * 1024, 1));
    const lstat = fs.promises.lstat;
    let removed = false;
    // The sandbox removes `gone` after the walk read its entry and before the walk opens it, as a busy program does.
    const spy = jest.spyOn(fs.promises, 'lstat').mockImplementation((async (p: fs.PathLike, o?: unknown) => {
      const stat = await (lstat as (p: fs.PathLike, o?: unknown) => Promise<fs.Stats>).call(fs.promises, p, o);
      if (String(p).endsWith('/gone')) {
        fs.rmSync(gone, { recursive: true, force: true });
        removed = true;
      }
      return stat;
    }) as typeof fs.promises.lstat);
    try {
      const total = await treeBytes(dir, { stopAt: 1 << 30 });
      expect(removed).toBe(true);
      // The folder, `gone` as listed, `kept` and its 64 KiB file: counted, and far from any limit.
      expect(total).toBeGreaterThanOrEqual(3 * MIN_ENTRY_BYTES + 64 * 1024);
      expect(total).toBeLessThan(1 << 20);
    } finally {
      spy.mockRestore();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a sandbox’s /tmp is read only once it is the sandbox’s own: a process that still sees the node’s /tmp reads 0', () => {
    // This process sees the node's own /tmp, as bubblewrap's child does until it has made the sandbox's root; its
    // disk is not the sandbox's. (A sandbox's own /tmp and /dev/shm filled: test/integration/limits.test.ts.)
    fs.writeFileSync(path.join(os.tmpdir(), `oz0-tmpfs-${process.pid}`), Buffer.alloc(1 << 20, 1));
    try {
      expect(tmpfsBytes(process.pid, '/tmp')).toBe(0);
      expect(tmpfsBytes(process.pid, '/dev/shm')).toBe(0);
      expect(tmpfsBytes(undefined, '/tmp')).toBe(0);
    } finally {
      fs.rmSync(path.join(os.tmpdir(), `oz0-tmpfs-${process.pid}`), { force: true });
    }
  });
});

describe('I4: groups that gone nodes left behind', () => {
  test('a starting node removes a dead node’s folder of groups, keeps a live one’s and others’, and passes over one another node removed first', () => {
    const parent = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-groups-'));
    try {
      for (const name of ['oz0-node-111-1/sandbox-a', 'oz0-node-222-1/sandbox-b', 'oz0-node-333-2', 'not-ours'])
        fs.mkdirSync(path.join(parent, name), { recursive: true });
      const asked: number[] = [];
      removeStaleGroups(
        (pid) => {
          asked.push(pid);
          // Another node's sweep, side by side with this one, takes 333's folder between the listing and the removal.
          if (pid === 333) fs.rmSync(path.join(parent, 'oz0-node-333-2'), { recursive: true });
          return pid === 222;
        },
        [parent],
      );
      expect(asked.sort()).toEqual([111, 222, 333]);
      expect(fs.readdirSync(parent).sort()).toEqual(['not-ours', 'oz0-node-222-1']);
      expect(fs.readdirSync(path.join(parent, 'oz0-node-222-1'))).toEqual(['sandbox-b']);
    } finally {
      fs.rmSync(parent, { recursive: true, force: true });
    }
  });
});

describe('I1: a uid of its own for each sandbox', () => {
  test('two holders of one range never hold one uid at once; a released uid is taken again; a full range says so', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-uids-'));
    try {
      const range = { first: 3_000_000_000, count: 2 };
      const a = new UidLeases(range, dir);
      const b = new UidLeases(range, dir);
      const first = a.acquire();
      const second = b.acquire();
      expect([first.uid, second.uid].sort()).toEqual([3_000_000_000, 3_000_000_001]);
      expect(() => a.acquire()).toThrow(
        'every uid of node.sandboxUids (3000000000 to 3000000001) is held by a running sandbox on this machine',
      );
      second.release();
      expect(a.acquire().uid).toBe(second.uid);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('a holder that dies with its lease leaves it to the next one, with the write grants it had to hand over', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-uids-'));
    try {
      const range = { first: 3_000_000_100, count: 1 };
      const script = `const { UidLeases } = require(${JSON.stringify(path.join(ROOT, 'dist/activities/sandbox/uids'))});
        new UidLeases(${JSON.stringify(range)}, ${JSON.stringify(dir)}).acquire().record(['/srv/out']);
        process.exit(0);`;
      expect(spawnSync(process.execPath, ['-e', script]).status).toBe(0);
      const lease = new UidLeases(range, dir).acquire();
      expect(lease).toMatchObject({ uid: 3_000_000_100, leftBehind: ['/srv/out'] });
      lease.release();
      expect(new UidLeases(range, dir).acquire().leftBehind).toEqual([]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});
