/**
 * I2 (issue 34.3): where a grant leads and what it is bound by. The rules, table-tested on resolutions made up here;
 * the descriptors, on real folders swapped for links between the check and the open. Tried for real, by a hostile
 * server that swaps and flips a folder another server is granted, in test/integration/grants.test.ts.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ChangedWhileStarting, PinnedPaths, byNameProblem, wayProblem } from '../../activities/sandbox/grants';
import type { Place, WritableGrant } from '../../activities/sandbox/grants';
import type { ResolvedPath } from '../../activities/sandbox/plan';
import { bwrapArgs } from '../../activities/sandbox/plan';
import type { PathKind } from '../../activities/sandbox/plan';

const places: Place[] = [
  { path: '/etc/oz0/oz0.config.json', what: "the node's config file" },
  { path: '/var/lib/oz0', what: "the node's state folder (node.stateDir)" },
  { path: '/srv/keys/ledger.db', what: 'the key store of plugin server "ledger" (servers.ledger.env.LEDGER_FILE)' },
];
const writable: WritableGrant[] = [{ field: 'servers.writer.sandbox.write[0]', path: '/srv/shared' }];
const direct = (real: string): ResolvedPath => ({ real, links: [] });
const via = (at: string, target: string, real = target): ResolvedPath => ({ real, links: [{ at, target }] });
const label = 'servers.reader.sandbox.read[0]: /srv/shared/inner';

describe('I2: where a grant leads', () => {
  test.each<[string, 'ro' | 'rw', ResolvedPath, string | undefined]>([
    ['a folder of its own', 'ro', direct('/srv/data'), undefined],
    [
      'the state folder itself',
      'ro',
      direct('/var/lib/oz0'),
      `${label} is the node's state folder (node.stateDir), which no sandbox may see`,
    ],
    [
      'another job’s folder, inside the state folder',
      'rw',
      direct('/var/lib/oz0/sandboxes/q/box-a_1-0123'),
      `${label} is in the node's state folder (node.stateDir), which no sandbox may see`,
    ],
    [
      'a link to the config file',
      'ro',
      via('/srv/shared/inner', '/etc/oz0/oz0.config.json'),
      `${label} leads through the link /srv/shared/inner → /etc/oz0/oz0.config.json to /etc/oz0/oz0.config.json, which is the node's config file, which no sandbox may see`,
    ],
    [
      'a link a sandbox may change, to the config’s folder (issue 34.3)',
      'ro',
      via('/srv/shared/inner', '/etc/oz0'),
      `${label} leads through the link /srv/shared/inner → /etc/oz0, inside servers.writer.sandbox.write[0] (/srv/shared), which a sandbox may change, to /etc/oz0 outside it`,
    ],
    [
      'a link a sandbox may change, to anywhere else outside its folder',
      'ro',
      via('/srv/shared/inner', '/home/op'),
      `${label} leads through the link /srv/shared/inner → /home/op, inside servers.writer.sandbox.write[0] (/srv/shared), which a sandbox may change, to /home/op outside it`,
    ],
    [
      'a link a sandbox may change, within its own folder',
      'ro',
      via('/srv/shared/inner', 'other', '/srv/shared/other'),
      undefined,
    ],
    ['the author’s link, outside every write grant', 'ro', via('/srv/app', '/data/app-1.2'), undefined],
    [
      'the author’s link to a folder that holds the config',
      'ro',
      via('/srv/conf', '/etc/oz0'),
      `${label} leads through the link /srv/conf → /etc/oz0 to /etc/oz0, which holds the node's config file, which no sandbox may see`,
    ],
    [
      'a folder named directly that holds the config: its author’s choice (the file is covered)',
      'ro',
      direct('/etc/oz0'),
      undefined,
    ],
    [
      'a write grant that holds a key store',
      'rw',
      direct('/srv/keys'),
      `${label} holds the key store of plugin server "ledger" (servers.ledger.env.LEDGER_FILE): a sandbox that may write there could move it aside or plant a file where the node writes one, so no sandbox may write there`,
    ],
    [
      'a write grant that holds the state folder',
      'rw',
      direct('/var/lib'),
      `${label} holds the node's state folder (node.stateDir): a sandbox that may write there could move it aside or plant a file where the node writes one, so no sandbox may write there`,
    ],
  ])('%s', (_what, mode, resolved, problem) => {
    expect(wayProblem(label, mode, resolved, places, writable)).toBe(problem);
  });
});

test.each<[string, string, 'refused' | 'bound by name']>([
  ['a grant inside a folder a sandbox may write', '/srv/shared/inner', 'refused'],
  ['the write grant itself (its way is the node’s)', '/srv/shared', 'bound by name'],
  ['a grant elsewhere', '/srv/data', 'bound by name'],
])('I2: where bubblewrap binds by name, %s (%s) is %s', (_what, real, verdict) => {
  const problem = byNameProblem(label, real, writable);
  if (verdict === 'bound by name') expect(problem).toBeUndefined();
  else
    expect(problem).toMatch(/inside servers\..*\.sandbox\.write\[\d\] \(\/srv\/shared\), which a sandbox may change/);
});

describe('I2: bound by what was checked', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-pins-'));
  const folder = path.join(dir, 'inner');
  const elsewhere = path.join(dir, 'elsewhere');
  beforeEach(() => {
    fs.rmSync(folder, { recursive: true, force: true });
    fs.rmSync(`${folder}.real`, { recursive: true, force: true });
    fs.mkdirSync(folder);
    fs.mkdirSync(elsewhere, { recursive: true });
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  test('a folder still there is pinned: a descriptor of it, numbered from 3 in bwrap, once per path', () => {
    const pins = new PinnedPaths();
    try {
      expect(pins.pin(folder)).toBe(3);
      expect(pins.pin(elsewhere)).toBe(4);
      expect(pins.pin(folder)).toBe(3);
      expect(pins.fds).toHaveLength(2);
      expect(fs.readlinkSync(`/proc/self/fd/${pins.fds[0]}`)).toBe(folder);
    } finally {
      pins.close();
    }
    expect(pins.fds).toEqual([]);
  });

  test.each<[string, () => void, RegExp]>([
    [
      'swapped for a link after it was checked: the link is not followed',
      () => {
        fs.renameSync(folder, `${folder}.real`);
        fs.symlinkSync(elsewhere, folder);
      },
      /changed while its sandbox started: it now is a link/,
    ],
    [
      'a folder on its way swapped for a link: the descriptor names where it leads now',
      () => {
        fs.mkdirSync(path.join(elsewhere, 'inner'), { recursive: true });
        fs.renameSync(dir, `${dir}.moved`);
        fs.symlinkSync(`${dir}.moved/elsewhere`, dir);
      },
      /changed while its sandbox started: it now leads to .*\.moved\/elsewhere\/inner$/,
    ],
    ['gone', () => fs.rmSync(folder, { recursive: true }), /changed while its sandbox started \(ENOENT\)/],
  ])('%s', (_what, change, said) => {
    change();
    const pins = new PinnedPaths();
    try {
      expect(() => pins.pin(folder)).toThrow(ChangedWhileStarting);
      expect(() => pins.pin(folder)).toThrow(said);
      expect(pins.fds).toEqual([]);
    } finally {
      pins.close();
      if (fs.existsSync(`${dir}.moved`)) {
        fs.unlinkSync(dir);
        fs.renameSync(`${dir}.moved`, dir);
      }
    }
  });

  test('the plan binds grants and its own folder through their descriptors; the system, the masks and the run folder by name', () => {
    const kinds: Record<string, PathKind> = {
      '/usr': { kind: 'dir' },
      '/srv': { kind: 'dir' },
      '/srv/data': { kind: 'dir' },
      '/srv/out': { kind: 'dir' },
      '/srv/data/keys.db': { kind: 'file' },
      '/var': { kind: 'dir' },
      '/var/lib': { kind: 'dir' },
      '/var/lib/oz0': { kind: 'dir' },
    };
    const pinned: string[] = [];
    const args = bwrapArgs(
      {
        command: '/usr/bin/node',
        args: [],
        cwd: '/var/lib/oz0/sandboxes/q/box',
        read: ['/srv/data'],
        write: ['/srv/out'],
        hidden: ['/srv/data/keys.db', '/var/lib/oz0'],
        network: 'none',
        runDir: '/tmp/oz0-net-1',
      },
      (p) => kinds[p] ?? { kind: 'missing' },
      (real) => pinned.push(real) + 2,
    );
    const flags = args.slice(0, args.indexOf('--')).join(' ');
    expect(pinned).toEqual(['/srv/data', '/srv/out', '/var/lib/oz0/sandboxes/q/box']);
    expect(flags).toContain('--ro-bind-fd 3 /srv/data');
    expect(flags).toContain('--bind-fd 4 /srv/out');
    expect(flags).toContain('--bind-fd 5 /var/lib/oz0/sandboxes/q/box');
    expect(flags).toContain('--ro-bind /usr /usr');
    expect(flags).toContain('--ro-bind /dev/null /srv/data/keys.db');
    expect(flags).toContain('--ro-bind /tmp/oz0-net-1 /run/oz0');
    expect(flags).not.toMatch(/--(ro-)?bind \/srv/);
  });
});
