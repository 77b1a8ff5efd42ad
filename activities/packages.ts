/**
 * S1: servers named by their package (`"package": "npm:@scope/name@1.2.3"`, `"pypi:name==1.2.3"`), installed by the
 * node once, before any call, with the registries' own clients — npm, and pip in a venv of the package's own — into
 * `<node.stateDir>/packages/`, each in a folder of its own. Nothing is fetched when a server runs: a sandboxed server
 * gets its package's folder read-only and no network of its own.
 *
 * Checked, not trusted: npm checks every tarball of the tree against the registry's `integrity`; pip installs every file
 * of the tree with `--require-hashes`, against the sha256 the index gave for it (a resolution first, then the install
 * of exactly what was resolved). The package's own digest is recorded, and compared with the config's `integrity`
 * where it pins one. No install script runs (`--ignore-scripts`, wheels only): an install runs outside every sandbox.
 * A folder is complete or not there: it is made beside its place and renamed into it, so two nodes sharing a state
 * folder, or a node killed part-way, leave no half install.
 */
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import type { LoadedConfig, StdioServerConfig } from '../common/config';
import type { PackageSpec } from '../common/package-spec';
import { resolveCommand } from '../common/process-group';

/** What the node records beside an install: what it holds, its digest, and how its program runs. */
const StampSchema = z.object({
  package: z.string(),
  integrity: z.string(),
  /** How many packages the install holds, the package itself included. */
  packages: z.number().int(),
  /** Its programs, by name: a file of the install (relative), run by `node` or the venv's python, or by itself. */
  programs: z.record(z.string(), z.object({ file: z.string(), runBy: z.enum(['node', 'python', 'itself']) })),
  installedAt: z.string(),
});
type Stamp = z.infer<typeof StampSchema>;

const STAMP = 'oz0-package.json';

export class PackageError extends Error {
  override name = 'PackageError';
}

/** Where a node keeps the packages it installed: inside its state folder, the one part of it a sandbox may read. */
export function packagesRoot(config: Pick<LoadedConfig, 'baseDir' | 'node'>): string {
  return path.join(path.resolve(config.baseDir, config.node.stateDir), 'packages');
}

/** The folder of one package at one version. */
export function packageDir(config: Pick<LoadedConfig, 'baseDir' | 'node'>, pkg: PackageSpec): string {
  return path.join(packagesRoot(config), pkg.registry, `${pkg.name.replace('/', '+')}@${pkg.version}`);
}

function readStamp(dir: string): Stamp | undefined {
  try {
    return StampSchema.parse(JSON.parse(fs.readFileSync(path.join(dir, STAMP), 'utf8')));
  } catch {
    return undefined;
  }
}

/** A server named by its package, as it starts: its command and arguments, and its install's folder (read-only). */
export interface InstalledLaunch {
  command: string;
  args: string[];
  dir: string;
}

/**
 * How a server named by its package starts on this node, or why it cannot: its install must be there (a node makes it
 * at start, `oz0 plugin test` too), hold the digest the config pins, and have the program the config names.
 */
export function installedLaunch(
  config: Pick<LoadedConfig, 'baseDir' | 'node'>,
  name: string,
  server: StdioServerConfig,
): InstalledLaunch | { problem: string } {
  const pkg = server.package!;
  const dir = packageDir(config, pkg);
  const stamp = readStamp(dir);
  if (!stamp) {
    return {
      problem: `server "${name}" cannot start: its package ${pkg.spec} is not installed on this node (${dir}); a node installs it when it starts, and so does oz0 plugin test ${name}`,
    };
  }
  const problem = stampProblem(name, server, stamp);
  if (problem) return { problem: `server "${name}" cannot start: ${problem}` };
  const program = programOf(name, server, stamp);
  if ('problem' in program) return { problem: `server "${name}" cannot start: ${program.problem}` };
  const file = path.join(dir, program.file);
  if (program.runBy === 'node') return { command: process.execPath, args: [file, ...server.args], dir };
  if (program.runBy === 'python')
    return { command: path.join(dir, 'bin', 'python'), args: [file, ...server.args], dir };
  return { command: file, args: [...server.args], dir };
}

function stampProblem(name: string, server: StdioServerConfig, stamp: Stamp): string | undefined {
  if (server.integrity && server.integrity !== stamp.integrity) {
    return `servers.${name}.integrity pins ${server.package!.spec} to ${server.integrity}, and the registry's is ${stamp.integrity}: the package is not the one the config was written for`;
  }
  return undefined;
}

function programOf(
  name: string,
  server: StdioServerConfig,
  stamp: Stamp,
): Stamp['programs'][string] | { problem: string } {
  const names = Object.keys(stamp.programs);
  if (server.command) {
    if (Object.hasOwn(stamp.programs, server.command)) return stamp.programs[server.command];
    return {
      problem: `servers.${name}.command: ${server.package!.spec} has no program "${server.command}"; its programs: ${names.join(', ') || 'none'}`,
    };
  }
  if (names.length === 1) return stamp.programs[names[0]];
  return {
    problem: names.length
      ? `${server.package!.spec} has ${names.length} programs (${names.join(', ')}): name one in servers.${name}.command`
      : `${server.package!.spec} has no program to run (no "bin" in its package.json, no console script)`,
  };
}

export interface InstallOptions {
  /** The environment the registries' clients run in: where npm and pip are told their registry, proxy, cache. */
  env?: NodeJS.ProcessEnv;
  /** Told what is being installed, how it goes, and how it ended. */
  log?: (line: string) => void;
  /** Only these servers (default: every server named by its package). */
  only?: string[];
}

/** Installs every server the config names by its package that this node has not installed yet; throws saying why not. */
export async function installPackages(config: LoadedConfig, opts: InstallOptions = {}): Promise<void> {
  const servers = Object.entries(config.servers).filter(
    (e): e is [string, StdioServerConfig] =>
      'command' in e[1] && !!e[1].package && (!opts.only || opts.only.includes(e[0])),
  );
  const failures: string[] = [];
  for (const [name, server] of servers) {
    try {
      await installPackage(config, name, server, opts);
    } catch (err) {
      failures.push((err as Error).message);
    }
  }
  if (failures.length) throw new PackageError(failures.join('; '));
}

/** Installs one server's package (once: a complete install is kept), then checks it against the config. */
export async function installPackage(
  config: LoadedConfig,
  name: string,
  server: StdioServerConfig,
  opts: InstallOptions = {},
): Promise<InstalledLaunch> {
  const pkg = server.package!;
  const log = opts.log ?? (() => undefined);
  const dir = packageDir(config, pkg);
  if (!readStamp(dir)) {
    const started = Date.now();
    log(`installing ${pkg.spec} for server "${name}" into ${dir}, once: later starts use it`);
    const ticker = setInterval(
      () => log(`still installing ${pkg.spec} (${Math.round((Date.now() - started) / 1000)} s)`),
      10_000,
    );
    let stamp: Stamp;
    try {
      stamp = await install(pkg, dir, opts.env ?? process.env);
    } catch (err) {
      throw new PackageError(`server "${name}": ${pkg.spec} could not be installed: ${(err as Error).message}`);
    } finally {
      clearInterval(ticker);
    }
    const seconds = ((Date.now() - started) / 1000).toFixed(1);
    log(
      `installed ${pkg.spec} in ${seconds} s: ${stamp.packages} package${stamp.packages === 1 ? '' : 's'}, each checked against ${pkg.registry === 'npm' ? "the registry's integrity" : "the index's sha256"}; its own: ${stamp.integrity}`,
    );
  }
  const launch = installedLaunch(config, name, server);
  if ('problem' in launch) throw new PackageError(launch.problem);
  return launch;
}

async function install(pkg: PackageSpec, dir: string, env: NodeJS.ProcessEnv): Promise<Stamp> {
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  const work = `${dir}.partial-${process.pid}-${randomBytes(3).toString('hex')}`;
  try {
    const stamp = pkg.registry === 'npm' ? await installNpm(pkg, work, env) : await installPypi(pkg, work, env);
    readableByAll(work);
    fs.writeFileSync(path.join(work, STAMP), `${JSON.stringify(stamp, null, 2)}\n`);
    try {
      fs.renameSync(work, dir);
    } catch (err) {
      // Another node sharing the state folder installed it first: its install is as good as this one.
      if (!readStamp(dir)) throw err;
    }
    return readStamp(dir)!;
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/** Runs a registry's client; its last words when it fails. */
function run(command: string, args: string[], env: NodeJS.ProcessEnv, cwd: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(resolveCommand(command, env.PATH), args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out = (out + d.toString()).slice(-1_000_000)));
    child.stderr.on('data', (d: Buffer) => (err = (err + d.toString()).slice(-64_000)));
    child.on('error', (e) => reject(new Error(`${command} could not run: ${e.message}`)));
    child.on('close', (code) => {
      if (code === 0) resolve(out);
      else reject(new Error(`${path.basename(command)} ${args[0]} exited with code ${code}: ${lastLines(err || out)}`));
    });
  });
}

/** A client's last words, on one line. */
function lastLines(text: string, n = 6): string {
  const lines = text
    .split('\n')
    .map((l) => l.trim())
    .filter(Boolean);
  return lines.slice(-n).join(' | ') || 'it said nothing';
}

/** npm of the Node.js the node runs on, else the PATH's. */
function npmCommand(): string {
  const beside = path.join(path.dirname(process.execPath), 'npm');
  return fs.existsSync(beside) ? beside : 'npm';
}

/** The environment of a client the node runs: the node's, without what an `npm run` around the node set for itself. */
function clientEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(
    Object.entries(env).filter(
      ([k]) => !/^npm_(?:package_|lifecycle_|config_(?:prefix|global|local_prefix|workspaces?|save|dry_run)$)/i.test(k),
    ),
  );
}

const NpmLockSchema = z.object({
  packages: z.record(
    z.string(),
    z.object({ version: z.string().optional(), integrity: z.string().optional(), resolved: z.string().optional() }),
  ),
});
const NpmManifestSchema = z.object({
  name: z.string(),
  bin: z.union([z.string(), z.record(z.string(), z.string())]).optional(),
});

async function installNpm(pkg: PackageSpec, work: string, env: NodeJS.ProcessEnv): Promise<Stamp> {
  fs.mkdirSync(work);
  fs.writeFileSync(path.join(work, 'package.json'), '{ "name": "oz0-installed-package", "private": true }\n');
  await run(
    npmCommand(),
    [
      'install',
      '--prefix',
      work,
      '--ignore-scripts',
      '--save-exact',
      '--no-audit',
      '--no-fund',
      '--no-update-notifier',
      '--loglevel=error',
      `${pkg.name}@${pkg.version}`,
    ],
    clientEnv(env),
    work,
  );
  const lock = NpmLockSchema.parse(JSON.parse(fs.readFileSync(path.join(work, 'package-lock.json'), 'utf8')));
  const own = lock.packages[`node_modules/${pkg.name}`];
  if (!own || own.version !== pkg.version) {
    throw new Error(`npm installed ${own?.version ?? 'nothing'} for ${pkg.name}, not ${pkg.version}`);
  }
  // npm checked each tarball against the integrity its registry gave; one the registry gave none for is not taken.
  const unchecked = Object.entries(lock.packages).filter(([at, p]) => at !== '' && !p.integrity && p.resolved);
  if (!own.integrity || unchecked.length) {
    throw new Error(
      `the registry gave no integrity for ${own.integrity ? unchecked.map(([at]) => at.replace(/^.*node_modules\//, '')).join(', ') : pkg.name}: nothing checks what was fetched`,
    );
  }
  const packageFolder = path.join(work, 'node_modules', pkg.name);
  const manifest = NpmManifestSchema.parse(
    JSON.parse(fs.readFileSync(path.join(packageFolder, 'package.json'), 'utf8')),
  );
  const bins =
    typeof manifest.bin === 'string'
      ? { [manifest.name.replace(/^@[^/]+\//, '')]: manifest.bin }
      : (manifest.bin ?? {});
  const programs: Stamp['programs'] = {};
  for (const [bin, file] of Object.entries(bins)) {
    const rel = path.join('node_modules', pkg.name, path.normalize(file));
    if (rel.split(path.sep).includes('..')) continue;
    programs[bin] = { file: rel, runBy: runByNode(path.join(work, rel)) ? 'node' : 'itself' };
  }
  return {
    package: pkg.spec,
    integrity: own.integrity,
    packages: Object.keys(lock.packages).filter((k) => k !== '').length,
    programs,
    installedAt: new Date().toISOString(),
  };
}

/** A bin npm would run with Node.js: a `.js` file, or one whose `#!` line names node. */
function runByNode(file: string): boolean {
  if (/\.[cm]?js$/.test(file)) return true;
  try {
    const head = fs.readFileSync(file, 'utf8').slice(0, 200).split('\n')[0];
    return head.startsWith('#!') && /\bnode\b/.test(head);
  } catch {
    return false;
  }
}

const PipReportSchema = z.object({
  install: z.array(
    z.object({
      metadata: z.object({ name: z.string(), version: z.string() }),
      requested: z.boolean().optional(),
      download_info: z.object({
        url: z.string(),
        archive_info: z.object({ hashes: z.record(z.string(), z.string()).optional() }).optional(),
      }),
    }),
  ),
});

async function installPypi(pkg: PackageSpec, work: string, env: NodeJS.ProcessEnv): Promise<Stamp> {
  const python = ['python3', 'python'].map((p) => resolveCommand(p, env.PATH)).find((p) => p.includes('/'));
  if (!python) throw new Error('no python3 on the PATH to make its venv with');
  await run(python, ['-m', 'venv', work], env, path.dirname(work));
  const venvPython = path.join(work, 'bin', 'python');
  const pipEnv = { ...env, PIP_DISABLE_PIP_VERSION_CHECK: '1', PIP_NO_INPUT: '1' };
  // What pip would install, and the sha256 the index gave for each file (wheels only: building one runs its code).
  const report = path.join(work, 'oz0-report.json');
  await run(
    venvPython,
    [
      '-m',
      'pip',
      'install',
      '--dry-run',
      '--ignore-installed',
      '--only-binary',
      ':all:',
      '--quiet',
      '--report',
      report,
      `${pkg.name}==${pkg.version}`,
    ],
    pipEnv,
    work,
  );
  const resolved = PipReportSchema.parse(JSON.parse(fs.readFileSync(report, 'utf8'))).install;
  fs.rmSync(report);
  const lines: string[] = [];
  let own: string | undefined;
  for (const item of resolved) {
    const sha256 = item.download_info.archive_info?.hashes?.sha256 ?? localSha256(item.download_info.url);
    if (!sha256) {
      throw new Error(
        `the index gave no sha256 for ${item.metadata.name} ${item.metadata.version} (${item.download_info.url}): nothing would check what was fetched`,
      );
    }
    lines.push(`${item.metadata.name}==${item.metadata.version} --hash=sha256:${sha256}`);
    if (item.requested) own = sha256;
  }
  if (!own) throw new Error(`pip resolved no ${pkg.name}==${pkg.version}`);
  const requirements = path.join(work, 'oz0-requirements.txt');
  fs.writeFileSync(requirements, `${lines.join('\n')}\n`);
  // Exactly what was resolved, each file checked against its sha256.
  await run(
    venvPython,
    ['-m', 'pip', 'install', '--require-hashes', '--no-deps', '--only-binary', ':all:', '--quiet', '-r', requirements],
    pipEnv,
    work,
  );
  const scripts = z
    .array(z.string())
    .parse(
      JSON.parse(
        await run(
          venvPython,
          [
            '-c',
            'import importlib.metadata as m, json, sys; print(json.dumps(sorted(e.name for e in m.distribution(sys.argv[1]).entry_points if e.group == "console_scripts")))',
            pkg.name,
          ],
          pipEnv,
          work,
        ),
      ),
    );
  const programs: Stamp['programs'] = {};
  for (const script of scripts) programs[script] = { file: path.join('bin', script), runBy: 'python' };
  return {
    package: pkg.spec,
    integrity: `sha256:${own}`,
    packages: lines.length,
    programs,
    installedAt: new Date().toISOString(),
  };
}

/** The sha256 of a file a `file:` URL names (a wheel in a local folder pip was pointed at), else undefined. */
function localSha256(url: string): string | undefined {
  if (!url.startsWith('file:')) return undefined;
  try {
    return createHash('sha256')
      .update(fs.readFileSync(new URL(url)))
      .digest('hex');
  } catch {
    return undefined;
  }
}

/** Every file and folder of an install readable by a sandbox's own user (the node's umask may have said otherwise). */
function readableByAll(dir: string): void {
  for (const entry of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isSymbolicLink()) continue;
    const p = path.join(entry.parentPath, entry.name);
    const mode = fs.statSync(p).mode;
    const wanted = mode | 0o044 | (entry.isDirectory() || mode & 0o100 ? 0o011 : 0);
    if ((mode & 0o7777) !== (wanted & 0o7777)) fs.chmodSync(p, wanted & 0o7777);
  }
  fs.chmodSync(dir, 0o755);
}
