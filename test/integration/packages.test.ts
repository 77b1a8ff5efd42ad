/**
 * S1 (issue 45.1): servers named by their package. The node installs `npm:…@…` with npm and `pypi:…==…` with pip,
 * from registries of the test's own on 127.0.0.1 that serve real packages as the public ones do (test/helpers/
 * registries.ts), checks what it fetched against the registry's digests, and runs the server from its install: a
 * sandboxed one with the install read-only and no network, a plugin one as it is (the control). A registry that lies
 * about a digest, and a config that pins another digest, leave nothing installed and say why.
 */
import fs from 'node:fs';
import path from 'node:path';
import { installPackage, installPackages, packageDir, PackageError } from '../../activities/packages';
import { parseConfig } from '../../common/config';
import type { LoadedConfig, StdioServerConfig } from '../../common/config';
import { callsOf } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import {
  buildProbeWheel,
  packProbeServer,
  registryEnv,
  serveNpmRegistry,
  servePypiIndex,
  sha512Integrity,
} from '../helpers/registries';
import type { Served } from '../helpers/registries';
import { ROOT, runJob, tmpDir, useTemporal } from '../helpers/temporal';
import { oz0 } from '../helpers/cli';
import type { PluginTestReport } from '../../plugin/drill/report';

const temporal = useTemporal();

const NPM_NAME = '@oz0-test/probe-server';
const npmPackage = packProbeServer(NPM_NAME, '1.0.0');
const wheel = buildProbeWheel('oz0-probe-server', '1.0.0');
let npm: Served;
let pypi: Served;
const saved = { ...process.env };

beforeAll(async () => {
  npm = await serveNpmRegistry([npmPackage]);
  pypi = await servePypiIndex([wheel]);
});

afterEach(() => {
  for (const key of Object.keys(process.env)) if (!(key in saved)) delete process.env[key];
  Object.assign(process.env, saved);
});

afterAll(async () => {
  await npm?.close();
  await pypi?.close();
});

/** The node's environment for this test: the test's registries (as an operator's npmrc or pip.conf would say). */
function useRegistries(at: { npm?: string; pypi?: string }) {
  for (const [key, value] of Object.entries(registryEnv(at))) {
    if (value === undefined) delete process.env[key];
    else process.env[key] = value;
  }
}

/** A config outside any Temporal, its state in a folder of its own. */
function bare(servers: Record<string, unknown>): LoadedConfig {
  return { ...parseConfig({ servers, node: { stateDir: tmpDir('oz0-state-') } }), baseDir: ROOT, source: 'test' };
}

interface Probe {
  write: string;
  net: string;
  args: string[];
  version: string;
  dir: string;
}

test('S1: a package from npm runs sandboxed from its install (read-only, no network) and as a plugin (the control)', async () => {
  useRegistries({ npm: npm.url });
  const port = new URL(npm.url).port;
  const pkg = `npm:${NPM_NAME}@1.0.0`;
  const config = temporal.config({
    servers: {
      boxed: { package: pkg, args: [`127.0.0.1:${port}`], sandbox: true },
      plain: { package: pkg, args: [`127.0.0.1:${port}`] },
    },
  });
  const spec: JobSpec = { tenant: 'acme', steps: [{ call: 'boxed.probe' }, { call: 'plain.probe' }] };
  const { trace } = await runJob(temporal, config, spec);
  const fetched = npm.requests.length;
  const [boxed, plain] = callsOf(trace).map((c) => {
    expect(c.result.isError).toBe(false);
    return JSON.parse((c.result.content[0] as { text: string }).text) as Probe;
  });
  const dir = packageDir(config, { registry: 'npm', name: NPM_NAME, version: '1.0.0', spec: pkg });
  // Installed once, where the node keeps packages, and run from there: with its own arguments.
  expect(boxed.dir).toBe(path.join(dir, 'node_modules', NPM_NAME));
  expect(boxed.args).toEqual([`127.0.0.1:${port}`]);
  expect(boxed.version).toBe('1.0.0');
  // The sandbox: its install read-only, no network (the registry's port refused on the sandbox's own loopback).
  expect(boxed.write).toBe('EROFS');
  expect(boxed.net).toBe('ECONNREFUSED');
  // The control, the same package as a plugin: the operator's own process, with the node's network.
  expect(plain.net).toBe('connected');
  const stamp = JSON.parse(fs.readFileSync(path.join(dir, 'oz0-package.json'), 'utf8'));
  expect(stamp).toMatchObject({ package: pkg, integrity: npmPackage.integrity, packages: 1 });
  // Fetched from the registry at the node's start, never when a server ran.
  expect(npm.requests).toContain(`/${NPM_NAME}`);
  expect(npm.requests.filter((r) => r.endsWith('.tgz'))).toHaveLength(1);
  await runJob(temporal, config, { tenant: 'acme', steps: [{ call: 'boxed.probe' }] });
  expect(npm.requests).toHaveLength(fetched);
}, 240_000);

test('S1: a package from PyPI runs sandboxed from its venv (read-only, no network), checked against the index’s sha256', async () => {
  useRegistries({ pypi: pypi.url });
  const port = new URL(pypi.url).port;
  const pkg = 'pypi:oz0-probe-server==1.0.0';
  const config = temporal.config({
    servers: {
      boxed: { package: pkg, args: [`127.0.0.1:${port}`], sandbox: true, integrity: `sha256:${wheel.sha256}` },
    },
  });
  const { trace } = await runJob(temporal, config, { tenant: 'acme', steps: [{ call: 'boxed.probe' }] });
  const [call] = callsOf(trace);
  expect(call.result.isError).toBe(false);
  const probe = JSON.parse((call.result.content[0] as { text: string }).text) as Probe;
  const dir = packageDir(config, { registry: 'pypi', name: 'oz0-probe-server', version: '1.0.0', spec: pkg });
  expect(probe.dir.startsWith(`${dir}/lib/`)).toBe(true);
  expect([probe.write, probe.net, probe.args]).toEqual(['EROFS', 'ECONNREFUSED', [`127.0.0.1:${port}`]]);
  expect(fs.readFileSync(path.join(dir, 'oz0-requirements.txt'), 'utf8')).toBe(
    `oz0-probe-server==1.0.0 --hash=sha256:${wheel.sha256}\n`,
  );
  expect(pypi.requests).toContain(`/files/${wheel.file}`);
}, 240_000);

/** What installing the config's server `s` threw, and what it left in the node's packages folder. */
async function failedInstall(config: LoadedConfig) {
  const lines: string[] = [];
  const err = await installPackages(config, { log: (l) => lines.push(l) }).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(PackageError);
  const server = config.servers.s as StdioServerConfig;
  const dir = packageDir(config, server.package!);
  const left = fs.existsSync(path.dirname(dir)) ? fs.readdirSync(path.dirname(dir)) : [];
  return { message: (err as Error).message, lines, left };
}

test('S1: an npm registry whose integrity is not its tarball’s installs nothing; the control installs, saying so', async () => {
  const liar = await serveNpmRegistry([{ ...npmPackage, integrity: sha512Integrity(Buffer.from('another tarball')) }]);
  try {
    useRegistries({ npm: liar.url });
    const failed = await failedInstall(bare({ s: { package: `npm:${NPM_NAME}@1.0.0`, sandbox: true } }));
    expect(failed.message).toMatch(
      /^server "s": npm:@oz0-test\/probe-server@1\.0\.0 could not be installed: .*EINTEGRITY/,
    );
    expect(failed.left).toEqual([]);
  } finally {
    await liar.close();
  }
  useRegistries({ npm: npm.url });
  const config = bare({ s: { package: `npm:${NPM_NAME}@1.0.0`, sandbox: true } });
  const lines: string[] = [];
  const launch = await installPackage(config, 's', config.servers.s as StdioServerConfig, {
    log: (l) => lines.push(l),
  });
  expect(launch.command).toBe(process.execPath);
  expect(lines[0]).toMatch(
    /^installing npm:@oz0-test\/probe-server@1\.0\.0 for server "s" into .*, once: later starts use it$/,
  );
  expect(lines.at(-1)).toMatch(
    new RegExp(
      `^installed npm:@oz0-test/probe-server@1\\.0\\.0 in [\\d.]+ s: 1 package, each checked against the registry's integrity; its own: ${npmPackage.integrity.replace(/[+/]/g, '\\$&')}$`,
    ),
  );
}, 120_000);

test('S1: a config that pins another integrity than the registry’s refuses the package, before it runs', async () => {
  useRegistries({ npm: npm.url });
  const other = sha512Integrity(Buffer.from('what the author published'));
  const failed = await failedInstall(
    bare({ s: { package: `npm:${NPM_NAME}@1.0.0`, integrity: other, sandbox: true } }),
  );
  expect(failed.message).toBe(
    `server "s" cannot start: servers.s.integrity pins npm:${NPM_NAME}@1.0.0 to ${other}, and the registry's is ${npmPackage.integrity}: the package is not the one the config was written for`,
  );
}, 120_000);

test('S1: a PyPI index whose sha256 is not its wheel’s installs nothing', async () => {
  const liar = await servePypiIndex([{ ...wheel, sha256: '0'.repeat(64) }]);
  try {
    useRegistries({ pypi: liar.url });
    const failed = await failedInstall(bare({ s: { package: 'pypi:oz0-probe-server==1.0.0', sandbox: true } }));
    expect(failed.message).toMatch(/^server "s": pypi:oz0-probe-server==1\.0\.0 could not be installed: .*(hash|HASH)/);
    expect(failed.left).toEqual([]);
  } finally {
    await liar.close();
  }
}, 120_000);

test('S1: a package the registry does not have says so, and a program the package lacks is named with those it has', async () => {
  useRegistries({ npm: npm.url });
  const missing = await failedInstall(bare({ s: { package: `npm:${NPM_NAME}@9.9.9` } }));
  expect(missing.message).toMatch(
    /could not be installed: npm install exited with code 1: .*(ETARGET|No matching version)/,
  );
  const config = bare({ s: { package: `npm:${NPM_NAME}@1.0.0`, command: 'nope' } });
  const wrong = await installPackages(config).catch((e: Error) => e.message);
  expect(wrong).toBe(
    `server "s" cannot start: servers.s.command: npm:${NPM_NAME}@1.0.0 has no program "nope"; its programs: probe-server`,
  );
}, 120_000);

test('S1, 45.8: oz0 plugin test installs a package server first, saying so, and prints its functions as a table', async () => {
  useRegistries({ npm: npm.url });
  const dir = tmpDir('oz0-plugin-package-');
  const configFile = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(
    configFile,
    JSON.stringify({ servers: { probe: { package: `npm:${NPM_NAME}@1.0.0`, sandbox: true } } }),
  );
  // The test's registries, as the test's own process.env holds them (a child gets the real one otherwise).
  const first = await oz0(['plugin', 'test', 'probe', '--config', configFile], {});
  expect(first.stderr).toMatch(
    /^installing npm:@oz0-test\/probe-server@1\.0\.0 for server "probe" into .*\/\.oz0\/packages\/npm\/@oz0-test\+probe-server@1\.0\.0, once: later starts use it\ninstalled npm:/,
  );
  expect(first.stdout).toMatch(/^probe \(sandbox server, MCP 2025-11-25\): 1 function\n/);
  expect(first.stdout).toMatch(/\nfunctions:\nfunction +hints +a failed call\nprobe +readOnly +made again\n/);
  expect(first.code).toBe(0);
  // Installed once: the next run says nothing of it, and its JSON has every field the table shows.
  const again = await oz0(['plugin', 'test', 'probe', '--json', '--config', configFile], {});
  expect(again.stderr).toBe('');
  expect((JSON.parse(again.stdout) as PluginTestReport).listing).toEqual([
    { function: 'probe', hints: ['readOnly'], calls: 'again' },
  ]);
}, 120_000);
