/**
 * What a sandbox sees (SPEC I1-I3, I5), as bubblewrap's command line says it: pure rules, table-tested against a
 * made-up file system. The same rules are tried for real, by a hostile program, in test/integration/isolation.test.ts.
 */
import { bwrapArgs } from '../../activities/sandbox/plan';
import type { PathKind, SandboxPlan } from '../../activities/sandbox/plan';
import { isInternalAddress, isLoopbackHost, parseGrant } from '../../activities/sandbox/network';
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
          node: '/usr/bin/node',
          script: '/srv/oz0/forwarder.js',
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

  test.each<[string, boolean]>([
    ['127.0.0.1', true],
    ['::ffff:127.0.0.1', true],
    ['0.0.0.0', true],
    ['169.254.169.254', true],
    ['::1', true],
    ['fe80::1', true],
    ['93.184.216.34', false],
    ['2606:2800:220:1::1', false],
  ])('a granted name resolving to %s is refused as the node’s own (DNS rebinding): %s', (address, internal) => {
    expect(isInternalAddress(address)).toBe(internal);
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
