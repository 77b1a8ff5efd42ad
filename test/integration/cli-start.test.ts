/**
 * The CLI answers at once (issue 32): help loads only what help needs, and a command that connects to a Temporal
 * server that is not there says so within seconds, naming the address and `oz0 dev`, instead of waiting out gRPC's
 * deadline. No Temporal server is started here: the point is that there is none.
 */
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { refusal } from '../../common/connection';
import { buildIdOf, codeDigest } from '../../common/release';
import { freePort } from '../../worker/dev-server';
import { ROOT, tmpDir } from '../helpers/temporal';

const dir = tmpDir();

/**
 * Runs `main` of the built CLI in a child node once for each argv, then reports which modules that process loaded
 * (`require.cache`: modules loaded with `await import()` land there too) and every command path it found.
 */
function loadedBy(argvs: string[][] | 'every help', env: NodeJS.ProcessEnv = {}) {
  const out = path.join(dir, `loaded-${Date.now()}-${Math.random().toString(36).slice(2)}.json`);
  const script = `
    const fs = require('node:fs');
    const { buildProgram, main } = require(${JSON.stringify(path.join(ROOT, 'dist', 'client', 'cli', 'index.js'))});
    const paths = [[]];
    const walk = (cmd, prefix) => cmd.commands.forEach((c) => { paths.push([...prefix, c.name()]); walk(c, [...prefix, c.name()]); });
    walk(buildProgram(), []);
    const argvs = ${JSON.stringify(argvs)};
    (async () => {
      for (const argv of argvs === 'every help' ? paths.map((p) => [...p, '--help']) : argvs) await main(['node', 'oz0', ...argv]);
      fs.writeFileSync(${JSON.stringify(out)}, JSON.stringify({ paths: paths.map((p) => p.join(' ')), modules: Object.keys(require.cache) }));
      // What the commands said is not under test here (a refused one sets exit status 1).
      process.exitCode = 0;
    })();`;
  return new Promise<{ paths: string[]; modules: string[] }>((resolve, reject) => {
    execFile(
      process.execPath,
      ['-e', script],
      { env: { ...process.env, ...env }, timeout: 60_000 },
      (err, _o, stderr) =>
        err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(JSON.parse(fs.readFileSync(out, 'utf8'))),
    );
  });
}

/** The packages (and oz0's own folders) a process loaded, from its module paths. */
function packagesOf(modules: string[]): Set<string> {
  const names = new Set<string>();
  for (const m of modules) {
    const dep = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(m);
    if (dep) names.add(dep[1]);
    const own = /\/dist\/([^/]+)\//.exec(m);
    if (!dep && own) names.add(`dist/${own[1]}`);
  }
  return names;
}

/** What help must not load: Temporal's client, worker and protos, the MCP SDKs, zod, and oz0's node code. */
const HEAVY = [
  '@temporalio/client',
  '@temporalio/worker',
  '@temporalio/proto',
  '@temporalio/common',
  '@modelcontextprotocol/client',
  '@modelcontextprotocol/server',
  '@modelcontextprotocol/core',
  'zod',
  'pino',
  'dist/worker',
  'dist/activities',
];

test('CLI: --help of oz0 and of every command loads commander and the CLI files only: no Temporal client, no MCP SDK, no zod', async () => {
  const { paths, modules } = await loadedBy('every help');
  // Every command was asked, groups and leaves (dev, worker, job start … plugin test).
  expect(paths).toEqual(expect.arrayContaining(['', 'dev', 'job', 'job status', 'policy approve', 'plugin test']));
  expect(paths.length).toBeGreaterThan(15);
  const loaded = packagesOf(modules);
  expect([...loaded].filter((name) => HEAVY.includes(name))).toEqual([]);
  expect(loaded).toContain('commander');
  expect([...loaded].sort()).toEqual(['commander', 'dist/client']);
});

test('CLI: the same check sees what a command that connects loads (the control)', async () => {
  const address = `127.0.0.1:${await freePort()}`;
  const { modules } = await loadedBy([['job', 'status', 'X']], { TEMPORAL_ADDRESS: address });
  const loaded = packagesOf(modules);
  expect(loaded).toContain('@temporalio/client');
  expect(loaded).toContain('zod');
});

function oz0(args: string[], env: NodeJS.ProcessEnv) {
  const t = performance.now();
  return new Promise<{ code: number; stdout: string; stderr: string; ms: number }>((resolve) => {
    execFile(
      path.join(ROOT, 'bin', 'oz0'),
      args,
      { cwd: dir, env: { ...process.env, ...env }, timeout: 60_000 },
      (err, stdout, stderr) =>
        resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr, ms: performance.now() - t }),
    );
  });
}

test('CLI: every command that connects says at once that nothing listens at the address, and how to start oz0 dev', async () => {
  const port = await freePort();
  const address = `127.0.0.1:${port}`;
  const configFile = path.join(dir, 'refused.config.json');
  fs.writeFileSync(configFile, JSON.stringify({ temporal: { address } }));
  const spec = path.join(dir, 'spec.json');
  fs.writeFileSync(spec, JSON.stringify({ tenant: 'acme', steps: [{ call: 'a.b' }] }));
  const commands = [
    ['job', 'status', 'X'],
    ['job', 'start', spec],
    ['job', 'trace', 'X'],
    ['job', 'watch', 'X'],
    ['job', 'cancel', 'X'],
    ['call', 'list'],
    ['call', 'approve', 'X'],
    ['tool', 'kill', 'a.b'],
    ['policy', 'show', 'acme'],
    ['policy', 'set', 'acme', 'a.*', 'deny'],
    ['worker'],
  ];
  // One at a time: each is timed on its own, and a loaded machine is not loaded further.
  for (const args of commands) {
    const out = await oz0([...args, '--config', configFile], {});
    expect({ args, code: out.code, stderr: out.stderr }).toEqual({
      args,
      code: 1,
      stderr: expect.stringContaining(
        `oz0: cannot reach Temporal at ${address}: connection refused: no server listens on port ${port}; ` +
          'start the embedded default with `oz0 dev`',
      ),
    });
    // gRPC's own wait was 10 s; a refusal is known at once (the bound is loose for a loaded 2-core machine).
    expect(out.ms).toBeLessThan(5000);
  }
  // TEMPORAL_ADDRESS names the address as the config does, and the message names it.
  const byEnv = await oz0(['job', 'status', 'X'], { TEMPORAL_ADDRESS: address });
  expect(byEnv.stderr).toContain(`cannot reach Temporal at ${address}: connection refused`);
});

test('CLI: the refusal is a TCP connection refused, not a guess: a listening address, a proxy or a gRPC URI say nothing', async () => {
  const server = net.createServer((socket) => socket.destroy());
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const listening = `127.0.0.1:${(server.address() as net.AddressInfo).port}`;
  const refused = `127.0.0.1:${await freePort()}`;
  try {
    expect(await refusal(listening, {})).toBeUndefined();
    expect(await refusal(refused, {})).toMatch(/^connection refused: no server listens on port \d+$/);
    // gRPC would go through the proxy: a direct connection predicts nothing, and gRPC's own wait decides.
    expect(await refusal(refused, { https_proxy: 'http://127.0.0.1:9' })).toBeUndefined();
    expect(await refusal(`dns:///${refused}`, {})).toBeUndefined();
  } finally {
    server.close();
  }
});

test('issue 56: oz0 worker --version says the release and the build id of the built bundles, exit 0, with no Temporal there', async () => {
  const configFile = path.join(dir, 'version.config.json');
  fs.writeFileSync(configFile, JSON.stringify({ temporal: { address: `127.0.0.1:${await freePort()}` } }));
  const json = await oz0(['worker', '--version', '--json', '--config', configFile], {});
  expect(json).toMatchObject({ code: 0, stderr: '' });
  const said = JSON.parse(json.stdout) as Record<string, unknown>;
  // The build id is the digest of the two bundles a node of this build loads, as this test reads them itself.
  const digests = ['workflow-bundle.js', 'workflow-bundle-traced.js'].map((f) =>
    codeDigest(fs.readFileSync(path.join(ROOT, 'dist', f))),
  );
  const { version } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
  expect(said).toMatchObject({ version, buildId: buildIdOf(digests) });
  // Built in this checkout: a commit of it (npm run build read it from git), named in the release.
  const commit = said.commit as string;
  expect(commit).toMatch(/^[0-9a-f]{40}$/);
  expect(execFileSync('git', ['-C', ROOT, 'cat-file', '-t', commit], { encoding: 'utf8' }).trim()).toBe('commit');
  expect(said.release).toBe(`${version}+${commit.slice(0, 12)}${said.dirty ? '.dirty' : ''}`);

  const text = await oz0(['worker', '--version'], {});
  expect(text.code).toBe(0);
  expect(text.stdout).toBe(
    `oz0 ${said.release as string} (commit ${commit}${said.dirty ? ', with uncommitted changes' : ''}), build id ${said.buildId as string}\n`,
  );
  // The top level says the same.
  expect(await oz0(['--version'], {})).toMatchObject({ code: 0, stdout: text.stdout });
  expect(await oz0(['worker', '--json'], {})).toMatchObject({ code: 2, stderr: 'oz0: --json goes with --version\n' });
  // It reads files: no Temporal client or worker, no zod, no pino.
  const { modules } = await loadedBy([['worker', '--version'], ['--version']]);
  expect([...packagesOf(modules)].filter((name) => HEAVY.includes(name) && name !== 'dist/worker')).toEqual([]);
});

test('issue 56: a build without its git checkout says its commit is unknown, not the commit of a repository around it; OZ0_COMMIT names it', () => {
  // The build's step as `npm run build` runs it, in a copy of the package with no .git: inside a repository of its
  // own (a package installed in someone's project), and then with the commit given as a Docker build gives it.
  const outer = tmpDir();
  execFileSync('git', ['init', '-q', outer]);
  execFileSync('git', [
    '-C',
    outer,
    '-c',
    'user.name=t',
    '-c',
    'user.email=t@t',
    'commit',
    '-q',
    '--allow-empty',
    '-m',
    'x',
  ]);
  const pkg = path.join(outer, 'node_modules', 'oz0');
  fs.mkdirSync(path.join(pkg, 'dist', 'common'), { recursive: true });
  fs.copyFileSync(path.join(ROOT, 'package.json'), path.join(pkg, 'package.json'));
  fs.copyFileSync(path.join(ROOT, 'dist', 'common', 'release.js'), path.join(pkg, 'dist', 'common', 'release.js'));
  const build = (env: NodeJS.ProcessEnv = {}) =>
    execFileSync(process.execPath, [path.join(pkg, 'dist', 'common', 'release.js')], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, OZ0_COMMIT: '', ...env },
    });
  const { version } = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string };
  expect(build()).toBe(`release: ${version}+unknown\n`);
  expect(JSON.parse(fs.readFileSync(path.join(pkg, 'dist', 'release.json'), 'utf8'))).toEqual({});
  const given = 'c0ffee'.padEnd(40, '0');
  expect(build({ OZ0_COMMIT: given })).toBe(`release: ${version}+${given.slice(0, 12)}\n`);
  expect(() => build({ OZ0_COMMIT: 'main' })).toThrow(/oz0 build: OZ0_COMMIT: main is not a git commit/);
});
