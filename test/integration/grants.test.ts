/**
 * I2 (issue 34.3): grants by what they are. A sandboxed server of tenant acme with a write grant replaced a folder
 * inside it, which another server is granted to read, with a symlink to the node's config folder; tenant beta's job
 * then started that other server, and it read the node's config file and a secret file beside it. Each grant is now
 * resolved when its sandbox starts, held against what no sandbox may see and against links a sandbox could have made,
 * and bound by what was checked (an open file descriptor, bubblewrap's `--ro-bind-fd`), so the check and the mount
 * cannot disagree: tried here with the hostile server (test/fixtures/hostile.js), a link swapped once and a folder
 * flipped to a link and back as fast as it goes while the other server starts, beside the controls — the same grant
 * unswapped reads its file, a link the config's author made outside every write grant works, and bubblewrap bound by
 * path loses the race the node wins.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { LoadedConfig, SandboxConfig } from '../../common/config';
import { contentText } from '../../common/text';
import { Isolation } from '../../activities/sandbox';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { eventually, fixture, logger, tmpDir, uniqueId, useTemporal, wholeResult } from '../helpers/temporal';
import { sandboxed, writableDir } from '../helpers/sandbox';

const temporal = useTemporal();

/**
 * The node's config folder (its config file and a secret beside it, granted to nobody), and a folder the writer may
 * write holding `inner`, which the reader is granted to read.
 */
function setUp(readerGrant?: (shared: string) => string) {
  // Readable by everyone, as /etc/oz0 is: only the mount namespace keeps a sandbox out.
  const configDir = tmpDir('oz0-etc-');
  fs.chmodSync(configDir, 0o755);
  const files = { config: path.join(configDir, 'oz0.config.json'), secret: path.join(configDir, 'secret.env') };
  fs.writeFileSync(files.secret, 'DB_PASSWORD=hunter2\n', { mode: 0o644 });
  const shared = writableDir('oz0-shared-');
  const inner = path.join(shared, 'inner');
  fs.mkdirSync(inner);
  fs.chmodSync(inner, 0o777);
  fs.writeFileSync(path.join(inner, 'notes.txt'), 'notes the reader may read');
  const hostile = (sandbox: object) => ({ command: 'node', args: [fixture('hostile.js'), 'server'], sandbox });
  const base = temporal.config({
    servers: {
      writer: hostile(sandboxed({ write: [shared] })),
      reader: hostile(sandboxed({ read: [readerGrant ? readerGrant(shared) : inner] })),
    },
  });
  fs.writeFileSync(files.config, JSON.stringify({ servers: base.servers }), { mode: 0o644 });
  const config: LoadedConfig = { ...base, source: files.config };
  return { config, files, configDir, shared, inner };
}

function run(config: LoadedConfig, tenant: string, step: JobSpec['steps'][number]): Promise<JobTrace> {
  return temporal.client.workflow
    .start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId(tenant),
      args: [{ tenant, steps: [step] } satisfies JobSpec],
    })
    .then((h) => wholeResult(h, config));
}

/** The reader's tries at the files under its grant, as the hostile program reported them, or why it did not start. */
async function readThrough(config: LoadedConfig, inner: string) {
  const trace = await run(config, 'beta', {
    call: 'reader.escape',
    args: {
      files: {
        config: path.join(inner, 'oz0.config.json'),
        secret: path.join(inner, 'secret.env'),
        notes: path.join(inner, 'notes.txt'),
      },
    },
  });
  const [call] = callsOf(trace);
  const report = call.result.structuredContent as { tries?: Record<string, { reached: boolean }> } | undefined;
  const tries = report?.tries && {
    config: report.tries['read config'].reached,
    secret: report.tries['read secret'].reached,
    notes: report.tries['read notes'].reached,
  };
  return { tries, said: contentText(call.result.content), notes: call.attempts.map((a) => a.note ?? '') };
}

/** The config with one more server, the reader's program granted to read `dir` besides the system's folders. */
function withServerReading(config: LoadedConfig, name: string, dir: string): LoadedConfig {
  const reader = config.servers.reader as LoadedConfig['servers'][string] & { sandbox: SandboxConfig };
  return {
    ...config,
    servers: {
      ...config.servers,
      [name]: { ...reader, sandbox: { ...reader.sandbox, read: [...sandboxed().read, dir] } },
    },
  };
}

async function withNode<T>(config: LoadedConfig, fn: (node: Oz0Node) => Promise<T>): Promise<T> {
  const node = await createNode({ config, logger });
  return node.runUntil(() => fn(node));
}

test('I2: a grant a sandbox of another tenant swapped for a symlink to the node’s config folder is refused, saying which link; unswapped, the same grant reads its file (the control)', async () => {
  const { config, configDir, inner, shared } = setUp();
  const { before, after } = await withNode(config, async () => {
    const before = await readThrough(config, inner);
    const swapped = await run(config, 'acme', { call: 'writer.swap', args: { dir: inner, target: configDir } });
    expect(callsOf(swapped)[0].result.isError).toBe(false);
    expect(fs.readlinkSync(inner)).toBe(configDir);
    return { before, after: await readThrough(config, inner) };
  });
  expect(before.tries).toEqual({ config: false, secret: false, notes: true });
  // Swapped: nothing read, and the attempt says which grant, which link, and why.
  expect(after.tries).toBeUndefined();
  expect(after.said).toContain(
    `servers.reader.sandbox.read[2]: ${inner} leads through the link ${inner} → ${configDir}, inside servers.writer.sandbox.write[0] (${shared}), which a sandbox may change, to ${configDir} outside it`,
  );
});

test('I2: a folder flipped to a link to the config folder and back, as fast as it goes, while another tenant’s server starts again and again: no start shows what the link leads to; bubblewrap bound by name, as a node that checks and then mounts by name would, loses the race (the control)', async () => {
  const set = setUp();
  const { configDir, inner, files } = set;
  // One attempt a start: a refused start is not tried again, so the flipping's 20 s hold many starts on a busy machine.
  const config: LoadedConfig = { ...set.config, tools: { ...set.config.tools, 'reader.escape': { maxAttempts: 1 } } };
  const node = await createNode({ config, logger });
  const { starts, byName } = await node.runUntil(async () => {
    const flipping = run(config, 'acme', {
      call: 'writer.swap',
      args: { dir: inner, target: configDir, forMs: 20_000 },
    });
    const starts: Array<Awaited<ReturnType<typeof readThrough>>> = [];
    let done = false;
    void flipping.finally(() => (done = true));
    // Once the folder has been seen as a link (the writer's sandbox is flipping it), start the reader, a fresh sandbox
    // each job, until the flipping ends. A fixed wait was not enough: on a fresh clone's busy run the control's 200
    // tries all ran before the writer's sandbox had started.
    await eventually(() => (seenFlipping(inner) ? true : undefined), 60_000, 'the folder flipping');
    const byName = raceByName(node, inner, files.secret, () => done);
    while (!done && starts.length < 12) starts.push(await readThrough(config, inner));
    await flipping;
    return { starts, byName: await byName };
  });
  // Each start either bound the folder (the notes, never what the link leads to) or was refused saying why.
  for (const start of starts) {
    if (start.tries) expect(start.tries).toEqual({ config: false, secret: false, notes: true });
    // Caught as a link, mid-swap, or between the check and the mount — by the node, or by bubblewrap, which binds a
    // descriptor through the path it has now, then checks the mount is the descriptor's file: a flip that moved the
    // path away meanwhile fails the start (no source, or "Race condition binding dirfd", or a source gone by the time
    // bubblewrap mounts it: "Can't bind mount … No such file or directory").
    else {
      expect(start.said).toMatch(
        /which a sandbox may change|does not exist|changed while its sandbox started|bwrap: (Can't get type of source|Can't find source path|Race condition binding dirfd|Can't bind mount \S+ on \S+: Unable to mount source on destination: No such file or directory)/,
      );
    }
  }
  expect(starts.length).toBeGreaterThan(1);
  expect(byName.leaked).toBeGreaterThan(0);
  if (process.env.OZ0_TEST_FIGURES) {
    const bound = starts.filter((s) => s.tries).length;
    process.stdout.write(
      `I2 race: ${starts.length} starts, ${bound} bound, ${starts.length - bound} refused; by name: ${byName.leaked} leak in ${byName.tries} tries\n`,
    );
  }
});

/** Whether the folder is, right now, not the folder it was: a link, or moved aside mid-swap. */
function seenFlipping(dir: string): boolean {
  try {
    return fs.lstatSync(dir).isSymbolicLink();
  } catch {
    return true;
  }
}

/**
 * The control: bubblewrap run by the node's side with the grant bound by its name (`--ro-bind inner inner`), reading
 * the secret through it, while the folder flips, until a read gets through, the flipping ends, or 1,000 tries.
 */
async function raceByName(node: Oz0Node, inner: string, secret: string, flippingEnded: () => boolean) {
  const bwrap = node.pool.isolation.check().bwrap!.path;
  const system = ['--ro-bind', '/usr', '/usr', '--symlink', 'usr/bin', '/bin', '--symlink', 'usr/lib', '/lib'];
  let leaked = 0;
  let tries = 0;
  for (; tries < 1000 && leaked === 0 && !flippingEnded(); tries++) {
    const out = spawnSync(
      bwrap,
      [
        ...system,
        '--symlink',
        'usr/lib64',
        '/lib64',
        '--ro-bind',
        inner,
        inner,
        '--',
        '/bin/cat',
        path.join(inner, path.basename(secret)),
      ],
      { encoding: 'utf8' },
    );
    if (out.stdout.includes('hunter2')) leaked++;
    await new Promise((r) => setImmediate(r));
  }
  return { leaked, tries };
}

test('I2: a link the config’s author made outside every write grant is followed and bound where it leads; one a sandbox may change, leading within its own write grant, too (the controls)', async () => {
  const target = writableDir('oz0-data-');
  fs.writeFileSync(path.join(target, 'notes.txt'), 'behind the author’s link');
  const linkDir = tmpDir('oz0-links-');
  fs.chmodSync(linkDir, 0o755);
  const authored = path.join(linkDir, 'data');
  fs.symlinkSync(target, authored);
  const { config, inner, shared } = setUp((s) => path.join(s, 'within'));
  // Inside the writer's grant, a link to another folder of the same grant: nothing the writer could not copy in.
  fs.symlinkSync(inner, path.join(shared, 'within'));
  const both = withServerReading(config, 'author', authored);
  const read = (server: string, dir: string) =>
    run(both, 'beta', { call: `${server}.escape`, args: { files: { notes: path.join(dir, 'notes.txt') } } });
  const traces = await withNode(both, async () => [
    await read('author', authored),
    await read('reader', path.join(shared, 'within')),
  ]);
  for (const trace of traces) {
    const tries = callsOf(trace)[0].result.structuredContent as { tries: Record<string, { reached: boolean }> };
    expect(tries.tries['read notes'].reached).toBe(true);
  }
});

test('I2: a write grant that holds a plugin’s key store is refused, naming it: a sandbox could move the folder that holds it aside and read it at its next start (tried: bubblewrap lets it); a write grant beside it starts (the control)', async () => {
  const shared = writableDir('oz0-shared-');
  const sub = path.join(shared, 'sub');
  fs.mkdirSync(sub);
  const keys = path.join(sub, 'keys.db');
  fs.writeFileSync(keys, 'key store of the ledger');
  const beside = writableDir('oz0-beside-');
  const hostile = (write: string) => ({
    command: 'node',
    args: [fixture('hostile.js'), 'server'],
    sandbox: sandboxed({ write: [write] }),
  });
  const config = temporal.config({
    servers: {
      keys: { command: 'node', args: [fixture('probe-server.js')], env: { KEYS_DB: keys } },
      greedy: hostile(shared),
      modest: hostile(beside),
    },
  });
  const said = `servers.greedy.sandbox.write[0]: ${shared} holds the key store of plugin server "keys" (servers.keys.env.KEYS_DB): a sandbox that may write there could move it aside or plant a file where the node writes one, so no sandbox may write there`;
  const errors = new Isolation(config, logger).startupLines().filter((l) => l.level === 'error');
  expect(errors).toEqual([{ level: 'error', text: `server "greedy" cannot start: ${said}` }]);
  const [greedy, modest] = await withNode(config, async () => [
    await run(config, 'acme', { call: 'greedy.folder', args: {} }),
    await run(config, 'acme', { call: 'modest.folder', args: {} }),
  ]);
  expect(contentText(callsOf(greedy)[0].result.content)).toContain(said);
  expect(callsOf(modest)[0].result.isError).toBe(false);
  // Why: with the key store covered at its path, a sandbox that may write the folder moves the one that holds it.
  const bwrap = new Isolation(config, logger).check().bwrap!.path;
  const system = ['--ro-bind', '/usr', '/usr', '--symlink', 'usr/bin', '/bin', '--symlink', 'usr/lib', '/lib'];
  const moved = spawnSync(bwrap, [
    ...[...system, '--symlink', 'usr/lib64', '/lib64', '--bind', shared, shared, '--ro-bind', '/dev/null', keys],
    ...['--', '/bin/mv', sub, `${sub}2`],
  ]);
  expect(moved.status).toBe(0);
  expect(fs.readFileSync(path.join(`${sub}2`, 'keys.db'), 'utf8')).toBe('key store of the ledger');
});

test('I2: with a bubblewrap that cannot bind a descriptor (no --ro-bind-fd), a grant inside a folder a sandbox may write is refused at start, saying why; one outside every write grant starts, bound by name (the control)', async () => {
  const { config, inner, shared } = setUp();
  // The node's own bwrap, as upstream bubblewrap before 0.10 is: its --help without the descriptor binds, and either
  // of them an unknown option (so the control starts only if the node bound by name).
  const real = new Isolation(config, logger).check().bwrap!.path;
  const old = path.join(tmpDir('oz0-oldbwrap-'), 'bwrap');
  fs.writeFileSync(
    old,
    [
      '#!/bin/sh',
      `if [ "$1" = --help ]; then "${real}" --help 2>&1 | grep -v -- '-bind-fd '; exit 0; fi`,
      'for a; do case "$a" in --bind-fd|--ro-bind-fd) echo "bwrap: Unknown option $a" >&2; exit 1;; esac; done',
      `exec "${real}" "$@"`,
      '',
    ].join('\n'),
    { mode: 0o755 },
  );
  const outside = writableDir('oz0-outside-');
  fs.writeFileSync(path.join(outside, 'notes.txt'), 'outside every write grant');
  const named = withServerReading(config, 'plain', outside);
  const oldConfig: LoadedConfig = { ...named, node: { ...named.node, bwrap: old } };
  const lines = new Isolation(oldConfig, logger).startupLines();
  expect(lines).toContainEqual({
    level: 'warn',
    text: expect.stringMatching(/^sandbox grants: bubblewrap .* binds by name \(no --ro-bind-fd\)/),
  });
  expect(lines).toContainEqual({
    level: 'error',
    text: `server "reader" cannot start: servers.reader.sandbox.read[2]: ${inner} lies inside servers.writer.sandbox.write[0] (${shared}), which a sandbox may change, and this node's bubblewrap binds by name (no --ro-bind-fd): a folder there swapped for a link between the node's check and the mount would be followed; bubblewrap 0.10 or later (oz0's copy, or Debian 12's security update) binds what the node checked`,
  });
  const trace = await withNode(oldConfig, () =>
    run(oldConfig, 'beta', { call: 'plain.escape', args: { files: { notes: path.join(outside, 'notes.txt') } } }),
  );
  const tries = callsOf(trace)[0].result.structuredContent as { tries: Record<string, { reached: boolean }> };
  expect(tries.tries['read notes'].reached).toBe(true);
});

test('I2 (issue 44.9): a write grant that names {tenant} is a folder per tenant, made by the node: beta’s sandbox neither reads nor lists acme’s; a grant without it is shared, and the node says so at start (the control: beta reads what acme left there)', async () => {
  const data = writableDir('oz0-data-');
  const shared = writableDir('oz0-shared-');
  const hostile = (sandbox: object) => ({ command: 'node', args: [fixture('hostile.js'), 'server'], sandbox });
  const config = temporal.config({
    servers: {
      mine: hostile(sandboxed({ write: [path.join(data, '{tenant}')] })),
      ours: hostile(sandboxed({ write: [shared] })),
    },
  });
  const said = new Isolation(config, logger).startupLines();
  expect(said).toContainEqual({
    level: 'warn',
    text: `server "ours": its write grant ${shared} (servers.ours.sandbox.write[0]) is shared by every tenant's sandboxes of it; "${path.join(shared, '{tenant}')}" gives each tenant a folder of its own`,
  });
  expect(said.filter((l) => l.text.includes('server "mine"'))).toEqual([]);
  const files = async (tenant: string, server: string, args: Record<string, unknown>) => {
    const [call] = callsOf(await run(config, tenant, { call: `${server}.files`, args }));
    return call.result.structuredContent as {
      wrote: Record<string, string>;
      read: Record<string, string>;
      listed: Record<string, string | string[]>;
    };
  };
  const card = path.join(data, 'acme', 'card.txt');
  await withNode(config, async () => {
    const acme = await files('acme', 'mine', { write: { [card]: 'acme-card-4242' }, read: [card] });
    expect(acme.read[card]).toBe('acme-card-4242');
    const own = path.join(data, 'beta', 'own.txt');
    const beta = await files('beta', 'mine', {
      write: { [own]: 'beta’s', [path.join(data, 'acme', 'planted.txt')]: 'beta was here' },
      read: [card, own],
      list: [data, path.join(data, 'acme')],
    });
    expect(beta.read).toEqual({ [card]: 'error: ENOENT', [own]: 'beta’s' });
    expect(beta.wrote[path.join(data, 'acme', 'planted.txt')]).toMatch(/^error: /);
    expect(beta.listed).toEqual({ [data]: ['beta'], [path.join(data, 'acme')]: 'error: ENOENT' });
    // Made by the node: the data folder's owner's, the sandboxes' group may write it (a uid of its own each, as root).
    const made = fs.statSync(path.join(data, 'acme'));
    if (process.getuid?.() === 0) {
      expect([made.uid, made.gid, made.mode & 0o7777]).toEqual([0, config.node.sandboxGid, 0o2770]);
    }
    expect(fs.readdirSync(data).sort()).toEqual(['acme', 'beta']);
    expect(fs.existsSync(path.join(data, 'acme', 'planted.txt'))).toBe(false);
    // The control: the shared grant carries acme's file to beta.
    const left = path.join(shared, 'card.txt');
    await files('acme', 'ours', { write: { [left]: 'acme-card-4242' } });
    expect((await files('beta', 'ours', { read: [left] })).read[left]).toBe('acme-card-4242');
  });
});

test('I2, S4 (issue 45.6): what is hidden is what the config declares — a key store named in keyStores is covered in a granted folder; a plugin’s env naming a project folder, a URL or a version hides nothing, and a grant under that folder starts (before, it was refused)', async () => {
  const project = writableDir('oz0-project-');
  fs.mkdirSync(path.join(project, 'docs'));
  fs.writeFileSync(path.join(project, 'docs', 'guide.txt'), 'the project guide');
  const storeDir = writableDir('oz0-store-');
  const store = path.join(storeDir, 'keys.store');
  fs.writeFileSync(store, 'acme-key-record', { mode: 0o644 });
  const hostile = (sandbox: object) => ({ command: 'node', args: [fixture('hostile.js'), 'server'], sandbox });
  const config = temporal.config({
    servers: {
      plug: {
        command: 'node',
        args: [fixture('probe-server.js')],
        env: { PROJ: project, VERSION: '1.2.3', DOCS_URL: 'https://example.com/v1.2/docs' },
        keyStores: [store],
      },
      box: hostile(sandboxed({ read: [path.join(project, 'docs'), storeDir] })),
    },
  });
  const said = new Isolation(config, logger).startupLines();
  const hidden = said.find((l) => l.text.startsWith('hidden from every sandbox: '))!.text;
  expect(hidden).toContain(`${store} (the key store of plugin server "plug" (servers.plug.keyStores[0]))`);
  expect(hidden).not.toContain(project);
  expect(said.filter((l) => l.level === 'error')).toEqual([]);
  const guide = path.join(project, 'docs', 'guide.txt');
  await withNode(config, async () => {
    const [call] = callsOf(await run(config, 'acme', { call: 'box.files', args: { read: [guide, store] } }));
    const { read } = call.result.structuredContent as { read: Record<string, string> };
    expect(read[guide]).toBe('the project guide');
    // Covered: nothing of it reads, whatever the folder's grant says.
    expect(read[store]).not.toContain('acme-key-record');
  });
  // The control: not declared (and not an SQLite file by its name), the same file is the granted folder's, and reads.
  const plug = config.servers.plug as Extract<LoadedConfig['servers'][string], { command: string }>;
  const undeclared: LoadedConfig = { ...config, servers: { ...config.servers, plug: { ...plug, keyStores: [] } } };
  await withNode(undeclared, async () => {
    const [call] = callsOf(await run(undeclared, 'acme', { call: 'box.files', args: { read: [store] } }));
    expect((call.result.structuredContent as { read: Record<string, string> }).read[store]).toBe('acme-key-record');
  });
});
