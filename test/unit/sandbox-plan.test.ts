/**
 * What a sandbox sees (SPEC I1-I3, I5), as bubblewrap's command line says it: pure rules, table-tested against a
 * made-up file system. The same rules are tried for real, by a hostile program, in test/integration/isolation.test.ts.
 */
import { bwrapArgs, resolvePath } from '../../activities/sandbox/plan';
import type { PathKind, SandboxPlan } from '../../activities/sandbox/plan';
import { grantOf, isLoopbackHost, parseGrant } from '../../activities/sandbox/network';
import { refusedAddress } from '../../common/addresses';
import { keyed, ownGroups } from '../../activities/sandbox/limits';

/** A merged-/usr system: /bin, /lib… are symlinks; /etc and /usr folders; the rest as listed. */
function fsWith(entries: Record<string, PathKind['kind']> = {}) {
  const fsMap: Record<string, PathKind> = {
    '/usr': { kind: 'dir' },
    '/etc': { kind: 'dir' },
    '/bin': { kind: 'symlink', target: 'usr/bin' },
    '/sbin': { kind: 'symlink', target: 'usr/sbin' },
    '/lib': { kind: 'symlink', target: 'usr/lib' },
    '/lib64': { kind: 'symlink', target: 'usr/lib64' },
  };
  for (const [p, kind] of Object.entries(entries)) fsMap[p] = kind === 'symlink' ? { kind, target: 'x' } : { kind };
  return (p: string): PathKind => fsMap[p] ?? { kind: 'missing' };
}

/** {@link fsWith}, with symlinks given as `-> target` and every folder on the way to a listed path there. */
function fsOf(entries: Record<string, string>) {
  const kinds: Record<string, PathKind> = {};
  for (const [p, what] of Object.entries(entries)) {
    kinds[p] = what.startsWith('-> ') ? { kind: 'symlink', target: what.slice(3) } : { kind: what as 'dir' | 'file' };
    for (let dir = p.slice(0, p.lastIndexOf('/')); dir; dir = dir.slice(0, dir.lastIndexOf('/'))) {
      kinds[dir] ??= { kind: 'dir' };
    }
  }
  const base = fsWith();
  return (p: string): PathKind => kinds[p] ?? base(p);
}

const plan = (over: Partial<SandboxPlan> = {}): SandboxPlan => ({
  command: '/usr/bin/node',
  args: ['/srv/app/server.js'],
  cwd: '/var/lib/oz0/sandboxes/q/box',
  read: ['/srv/app/server.js'],
  write: [],
  hidden: ['/var/lib/oz0', '/etc/oz0/oz0.config.json'],
  network: 'none',
  ...over,
});

/** The flags before `--`, as [flag, ...operands] groups, for readable assertions. */
function before(args: string[]): string {
  return args.slice(0, args.indexOf('--')).join(' ');
}
function after(args: string[]): string[] {
  return args.slice(args.indexOf('--') + 1);
}

describe('I1: namespaces and the user the sandbox runs as', () => {
  test.each<[string, Partial<SandboxPlan>, RegExp[], RegExp[]]>([
    [
      'a node running as root: its own namespaces, no user namespace (it would map the sandbox to root outside)',
      { dropTo: { uid: 65534, gid: 65534, setpriv: '/usr/bin/setpriv' } },
      [/--unshare-pid --unshare-ipc --unshare-uts --unshare-cgroup-try --unshare-net/, /--die-with-parent/],
      [/--unshare-user/],
    ],
    [
      'a node that is not root: a user namespace, no nested ones, no capabilities',
      {},
      [/--unshare-user --disable-userns --cap-drop ALL/, /--unshare-net/],
      [/setpriv/],
    ],
    ['network "host": the node\'s own network', { network: 'host' }, [/--unshare-pid/], [/--unshare-net/]],
  ])('%s', (_what, over, present, absent) => {
    const args = bwrapArgs(plan(over), fsWith({ '/var/lib/oz0': 'dir' }));
    for (const p of present) expect(before(args)).toMatch(p);
    for (const p of absent) expect(before(args)).not.toMatch(p);
  });

  test('as root the program runs behind setpriv: an unprivileged uid and gid, no groups, no capabilities at all', () => {
    const args = bwrapArgs(plan({ dropTo: { uid: 1234, gid: 99, setpriv: '/usr/bin/setpriv' } }), fsWith());
    expect(after(args)).toEqual([
      '/usr/bin/setpriv',
      '--reuid=1234',
      '--regid=99',
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      '--no-new-privs',
      '--',
      '/usr/bin/node',
      '/srv/app/server.js',
    ]);
  });

  test('I5: bwrap sets PWD; `env -u PWD` runs the program, so it gets only its config’s environment', () => {
    expect(after(bwrapArgs(plan({ env: '/usr/bin/env' }), fsWith()))).toEqual([
      '/usr/bin/env',
      '-u',
      'PWD',
      '/usr/bin/node',
      '/srv/app/server.js',
    ]);
  });

  test('I3: with a forwarder, it listens first and then runs the program', () => {
    const args = bwrapArgs(
      plan({
        runDir: '/tmp/oz0-net-1',
        forwarder: {
          command: ['/usr/bin/node', '/srv/oz0/forwarder.js'],
          listeners: [
            { port: 41000, socket: 'gateway.sock' },
            { port: 3128, socket: 'proxy.sock' },
          ],
        },
      }),
      fsWith(),
    );
    expect(before(args)).toContain('--ro-bind /tmp/oz0-net-1 /run/oz0');
    expect(after(args)).toEqual([
      '/usr/bin/node',
      '/srv/oz0/forwarder.js',
      '41000=/run/oz0/gateway.sock',
      '3128=/run/oz0/proxy.sock',
      '--',
      '/usr/bin/node',
      '/srv/app/server.js',
    ]);
  });
});

describe('I2: files', () => {
  test('the system: /usr and /etc read-only, merged-/usr symlinks as symlinks; a fresh /proc and /dev, a private /tmp', () => {
    const flags = before(bwrapArgs(plan(), fsWith()));
    expect(flags).toContain('--ro-bind /usr /usr');
    expect(flags).toContain('--ro-bind /etc /etc');
    expect(flags).toContain('--symlink usr/bin /bin');
    expect(flags).toContain('--proc /proc --dev /dev --perms 1777 --tmpfs /tmp');
    expect(flags).not.toMatch(/--(ro-)?bind \/ \//);
    expect(flags).not.toContain('/home');
  });

  test('grants: reads read-only, writes read-write, its own folder read-write and its working directory', () => {
    const flags = before(
      bwrapArgs(
        plan({ read: ['/srv/app/server.js', '/srv/data'], write: ['/srv/out'] }),
        fsWith({ '/srv/data': 'dir', '/srv/out': 'dir' }),
      ),
    );
    expect(flags).toContain('--ro-bind /srv/app/server.js /srv/app/server.js');
    expect(flags).toContain('--ro-bind /srv/data /srv/data');
    expect(flags).toContain('--bind /srv/out /srv/out');
    expect(flags).toContain('--bind /var/lib/oz0/sandboxes/q/box /var/lib/oz0/sandboxes/q/box');
    expect(flags).toMatch(/--chdir \/var\/lib\/oz0\/sandboxes\/q\/box$/);
  });

  test('the folders on the way to a mount are made 0755 first (bwrap would make them 0700, closed to the sandbox user)', () => {
    const args = bwrapArgs(plan({ read: ['/srv/app/server.js'] }), fsWith());
    const flags = before(args);
    expect(flags).toContain('--dir /srv --dir /srv/app --ro-bind /srv/app/server.js');
    // Inside a bound folder nothing is made: it is the node's own, and read-only.
    const inside = before(bwrapArgs(plan({ read: ['/srv', '/srv/app/server.js'] }), fsWith({ '/srv': 'dir' })));
    expect(inside).not.toContain('--dir /srv/app');
  });

  test.each<[string, Partial<SandboxPlan>, Record<string, PathKind['kind']>, string[], string[]]>([
    [
      'the config file inside a granted folder reads as empty (/dev/null)',
      { read: ['/etc/oz0'], hidden: ['/etc/oz0/oz0.config.json'] },
      { '/etc/oz0': 'dir', '/etc/oz0/oz0.config.json': 'file' },
      ['--ro-bind /dev/null /etc/oz0/oz0.config.json'],
      [],
    ],
    [
      'the state folder inside a granted folder is an empty read-only tmpfs, and the own folder is bound into it after',
      { read: ['/srv'], hidden: ['/srv/.oz0'], cwd: '/srv/.oz0/sandboxes/q/box' },
      { '/srv': 'dir', '/srv/.oz0': 'dir' },
      [
        '--tmpfs /srv/.oz0 --dir /srv/.oz0/sandboxes --dir /srv/.oz0/sandboxes/q --bind /srv/.oz0/sandboxes/q/box',
        '--remount-ro /srv/.oz0',
      ],
      [],
    ],
    [
      'a key store beside granted files is hidden',
      { read: ['/srv/data'], hidden: ['/srv/data/ledger.db', '/srv/data/ledger.db-wal'] },
      { '/srv/data': 'dir', '/srv/data/ledger.db': 'file', '/srv/data/ledger.db-wal': 'file' },
      ['--ro-bind /dev/null /srv/data/ledger.db', '--ro-bind /dev/null /srv/data/ledger.db-wal'],
      [],
    ],
    [
      'what no mount shows needs no mask',
      { read: ['/srv/app/server.js'], hidden: ['/var/lib/oz0', '/home/op/oz0.config.json'] },
      { '/var/lib/oz0': 'dir', '/home/op/oz0.config.json': 'file' },
      [],
      ['/dev/null', '--tmpfs /var/lib/oz0', '/home/op'],
    ],
  ])('%s', (_what, over, files, present, absent) => {
    const flags = before(bwrapArgs(plan(over), fsWith(files)));
    for (const p of present) expect(flags).toContain(p);
    for (const p of absent) expect(flags).not.toContain(p);
  });

  test('the own folder is bound after the masks, the run folder after it, and the masks made read-only last', () => {
    const flags = before(
      bwrapArgs(
        plan({ read: ['/srv'], hidden: ['/srv/.oz0'], cwd: '/srv/.oz0/s/box', runDir: '/tmp/oz0-net-x' }),
        fsWith({ '/srv': 'dir', '/srv/.oz0': 'dir' }),
      ),
    );
    const at = (s: string) => flags.indexOf(s);
    expect(at('--tmpfs /srv/.oz0')).toBeLessThan(at('--bind /srv/.oz0/s/box'));
    expect(at('--bind /srv/.oz0/s/box')).toBeLessThan(at('--ro-bind /tmp/oz0-net-x /run/oz0'));
    expect(at('--ro-bind /tmp/oz0-net-x /run/oz0')).toBeLessThan(at('--remount-ro /srv/.oz0'));
  });
});

describe('I2: symlinks, as the node resolves them (issue 32.4)', () => {
  /** The usual layout: a project folder granted `read`, its `.venv` made by `python3 -m venv` from pyenv's Python. */
  const venv = {
    '/home/op/proj/server.py': 'file',
    '/home/op/proj/.venv/pyvenv.cfg': 'file',
    '/home/op/proj/.venv/lib/python3.11/site-packages': 'dir',
    '/home/op/proj/.venv/lib64': '-> lib',
    '/home/op/proj/.venv/bin/python': '-> python3.11',
    '/home/op/proj/.venv/bin/python3.11': '-> /home/op/.pyenv/versions/3.11.7/bin/python3.11',
    '/home/op/.pyenv/versions/3.11.7/bin/python3.11': 'file',
    '/home/op/.pyenv/versions/3.11.7/lib': 'dir',
  };
  const venvPlan = (over: Partial<SandboxPlan> = {}) =>
    plan({
      command: '/home/op/proj/.venv/bin/python',
      args: ['/home/op/proj/server.py'],
      // What the program needs (./program.ts), then the grant.
      read: [
        '/home/op/proj/.venv/bin/python',
        '/home/op/.pyenv/versions/3.11.7/bin/python3.11',
        '/home/op/proj/.venv/lib',
        '/home/op/proj/.venv/lib64',
        '/home/op/proj/.venv/pyvenv.cfg',
        '/home/op/.pyenv/versions/3.11.7/lib',
        '/home/op/proj/server.py',
        '/home/op/proj',
      ],
      hidden: [],
      ...over,
    });

  test('resolving follows links at any level, relative and absolute, to where they end', () => {
    expect(resolvePath('/home/op/proj/.venv/bin/python', fsOf(venv))).toEqual({
      real: '/home/op/.pyenv/versions/3.11.7/bin/python3.11',
      links: [
        { at: '/home/op/proj/.venv/bin/python', target: 'python3.11' },
        { at: '/home/op/proj/.venv/bin/python3.11', target: '/home/op/.pyenv/versions/3.11.7/bin/python3.11' },
      ],
    });
    // A link on the way (a folder), then a link to a link; a loop stops as the kernel does (ELOOP), taken as written.
    const files = fsOf({ '/data/real/x': 'file', '/srv/data': '-> /srv/alias', '/srv/alias': '-> ../data/real' });
    expect(resolvePath('/srv/data/x', files).real).toBe('/data/real/x');
    expect(resolvePath('/a/b', fsOf({ '/a/b': '-> /a/c', '/a/c': '-> /a/b' })).real).toMatch(/^\/a\/[bc]$/);
  });

  test('a venv in its granted project folder: its python is the folder’s own link, never a bind on top of it (bwrap: “Can’t create file at …/bin/python”)', () => {
    const flags = before(bwrapArgs(venvPlan(), fsOf(venv)));
    expect(flags).toContain('--ro-bind /home/op/proj /home/op/proj');
    expect(flags).not.toMatch(/--(ro-)?bind \S+ \/home\/op\/proj\/\S+/);
    expect(flags).not.toContain('--symlink python3.11');
    // Where the links end is bound where it is; the folders on its way made 0755 first.
    expect(flags).toContain(
      '--dir /home/op/.pyenv --dir /home/op/.pyenv/versions --dir /home/op/.pyenv/versions/3.11.7 --dir /home/op/.pyenv/versions/3.11.7/bin --ro-bind /home/op/.pyenv/versions/3.11.7/bin/python3.11',
    );
    expect(flags).toContain('--ro-bind /home/op/.pyenv/versions/3.11.7/lib /home/op/.pyenv/versions/3.11.7/lib');
    expect(after(bwrapArgs(venvPlan(), fsOf(venv)))).toEqual([
      '/home/op/proj/.venv/bin/python',
      '/home/op/proj/server.py',
    ]);
  });

  test('a venv outside any grant: each link on the way is made as the same link, and what it leads to is bound', () => {
    const flags = before(
      bwrapArgs(venvPlan({ read: venvPlan().read.filter((p) => p !== '/home/op/proj') }), fsOf(venv)),
    );
    expect(flags).toContain('--symlink python3.11 /home/op/proj/.venv/bin/python');
    expect(flags).toContain(
      '--symlink /home/op/.pyenv/versions/3.11.7/bin/python3.11 /home/op/proj/.venv/bin/python3.11',
    );
    expect(flags).toContain('--symlink lib /home/op/proj/.venv/lib64');
    expect(flags).toContain('--ro-bind /home/op/proj/.venv/lib /home/op/proj/.venv/lib');
    expect(flags).toContain('--ro-bind /home/op/proj/.venv/pyvenv.cfg /home/op/proj/.venv/pyvenv.cfg');
    expect(flags).toContain('--ro-bind /home/op/proj/server.py /home/op/proj/server.py');
    // The links are made in the sandbox's own tmpfs, never in a bound folder of the node.
    expect(flags.indexOf('--dir /home/op/proj/.venv/bin')).toBeLessThan(
      flags.indexOf('--symlink python3.11 /home/op/proj/.venv/bin/python'),
    );
  });

  test('a grant through a symlinked folder: the link is made, its end bound, and a file the node hides there masked where it really is', () => {
    const files = fsOf({ '/srv/app': '-> /data/app', '/data/app/keys.db': 'file', '/data/app/notes.txt': 'file' });
    const flags = before(bwrapArgs(plan({ read: ['/srv/app'], hidden: ['/srv/app/keys.db'] }), files));
    expect(flags).toContain('--symlink /data/app /srv/app');
    expect(flags).toContain('--ro-bind /data/app /data/app');
    expect(flags).toContain('--ro-bind /dev/null /data/app/keys.db');
    expect(flags).not.toContain('--ro-bind /srv/app /srv/app');
  });

  test.each<[string, Partial<SandboxPlan>, string[], string[]]>([
    [
      'a read inside a read grant is the grant’s already: no second bind',
      { read: ['/srv', '/srv/app/server.js'] },
      ['--ro-bind /srv /srv'],
      ['--ro-bind /srv/app/server.js'],
    ],
    [
      'a write grant inside a read grant is bound read-write over it',
      { read: ['/srv'], write: ['/srv/out'] },
      ['--ro-bind /srv /srv', '--bind /srv/out /srv/out'],
      [],
    ],
    [
      'the program inside a write grant stays read-only: bound over it, after it',
      { read: ['/srv/app/server.js'], write: ['/srv'] },
      ['--bind /srv /srv --ro-bind /srv/app/server.js /srv/app/server.js'],
      [],
    ],
    [
      'a path granted both ways is written to',
      { read: ['/srv/out'], write: ['/srv/out'] },
      ['--bind /srv/out'],
      ['--ro-bind /srv/out'],
    ],
  ])('%s', (_what, over, present, absent) => {
    const files = fsOf({ '/srv/app/server.js': 'file', '/srv/out': 'dir' });
    const flags = before(bwrapArgs(plan({ hidden: [], ...over }), files));
    for (const p of present) expect(flags).toContain(p);
    for (const p of absent) expect(flags).not.toContain(p);
  });
});

describe('I3: network grants', () => {
  test.each<[string, { host: string; port: number }]>([
    ['api.example.com:443', { host: 'api.example.com', port: 443 }],
    ['127.0.0.1:5432', { host: '127.0.0.1', port: 5432 }],
    ['[::1]:8080', { host: '::1', port: 8080 }],
    ['API.Example.COM:80', { host: 'api.example.com', port: 80 }],
  ])('%s is host %j', (grant, parts) => {
    expect(parseGrant(grant)).toEqual(parts);
  });

  test.each<[string, boolean]>([
    ['localhost', true],
    ['127.0.0.1', true],
    ['127.1.2.3', true],
    ['::1', true],
    ['api.example.com', false],
    ['10.0.0.1', false],
  ])('%s is loopback (reached at its own port inside, without the proxy): %s', (host, loopback) => {
    expect(isLoopbackHost(host)).toBe(loopback);
  });

  test('a grant with "private": true, and one without', () => {
    expect(grantOf({ to: 'db.internal:5432', private: true })).toEqual({
      host: 'db.internal',
      port: 5432,
      private: true,
    });
    expect(grantOf('api.example.com:443')).toEqual({ host: 'api.example.com', port: 443 });
  });

  const own = new Set(['10.0.2.15', 'fd00::15']);
  test.each<[string, string | undefined, string | undefined]>([
    ['127.0.0.1', '127.0.0.1, a loopback address', undefined],
    ['::ffff:127.0.0.1', '::ffff:127.0.0.1 (127.0.0.1), a loopback address', undefined],
    ['::1', '::1, a loopback address', undefined],
    ['0.0.0.0', '0.0.0.0, the unspecified address', undefined],
    ['::', '::, the unspecified address', undefined],
    ['169.254.169.254', '169.254.169.254, a link-local address (where cloud metadata services answer)', undefined],
    ['fe80::1', 'fe80::1, a link-local address (where cloud metadata services answer)', undefined],
    ['224.0.0.1', '224.0.0.1, a multicast address', undefined],
    ['ff02::1', 'ff02::1, a multicast address', undefined],
    ['255.255.255.255', '255.255.255.255, the broadcast address', undefined],
    ['10.0.0.7', '10.0.0.7, a private address (RFC 1918)', 'allowed'],
    ['172.16.5.4', '172.16.5.4, a private address (RFC 1918)', 'allowed'],
    ['192.168.1.1', '192.168.1.1, a private address (RFC 1918)', 'allowed'],
    ['::ffff:10.0.0.1', '::ffff:10.0.0.1 (10.0.0.1), a private address (RFC 1918)', 'allowed'],
    ['100.100.100.200', '100.100.100.200, a shared address (100.64.0.0/10, RFC 6598)', 'allowed'],
    ['fd00:ec2::254', 'fd00:ec2::254, a unique local address (fc00::/7)', 'allowed'],
    ['64:ff9b::a00:1', '64:ff9b::a00:1 (10.0.0.1), a private address (RFC 1918)', 'allowed'],
    ['2002:a00:1::1', '2002:a00:1::1, a 6to4 address (it leads to any IPv4 address)', undefined],
    ['10.0.2.15', '10.0.2.15, an address of the node itself', undefined],
    ['::ffff:10.0.2.15', '::ffff:10.0.2.15 (10.0.2.15), an address of the node itself', undefined],
    ['fd00::15', 'fd00::15, an address of the node itself', undefined],
    ['93.184.216.34', undefined, 'allowed'],
    ['2606:2800:220:1::1', undefined, 'allowed'],
  ])('I3: a granted name resolving to %s: %s', (address, refused, withPrivate) => {
    expect(refusedAddress(address, own)?.words).toBe(refused);
    // `"private": true` lets a name reach the private ranges, never the node's own or loopback.
    expect(refusedAddress(address, own, true) === undefined ? 'allowed' : undefined).toBe(withPrivate);
  });
});

describe('I4: reading control groups', () => {
  test('flat-keyed files: a key’s number, 0 when missing', () => {
    const events = 'low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n';
    expect(keyed(events, 'oom_kill')).toBe(1);
    expect(keyed(events, 'max')).toBe(3);
    expect(keyed(events, 'oom_group_kill')).toBe(0);
    expect(keyed('oom_kill_disable 0\nunder_oom 0\noom_kill 2\n', 'oom_kill')).toBe(2);
  });

  test('/proc/self/cgroup: v2 and each v1 controller', () => {
    const groups = ownGroups('9:name=systemd:/\n8:pids:/\n4:memory:/process_api/x\n2:cpu,cpuacct:/a\n0::/b\n');
    expect(groups.get('0')).toBe('/b');
    expect(groups.get('memory')).toBe('/process_api/x');
    expect(groups.get('cpuacct')).toBe('/a');
    expect(groups.get('cpu')).toBe('/a');
    expect(groups.get('pids')).toBe('/');
  });
});
