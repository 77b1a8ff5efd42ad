/**
 * Which forwarder a sandbox whose network is its own runs (SPEC I3, I7): oz0's native one, a static Go program built
 * from `native/forwarder/` into `.tools/forwarder/<source digest>/`, or the Node.js one (./forwarder.ts) where Go is
 * missing. Both keep one contract (`PORT=SOCKET... -- COMMAND ARGS...`) and hold no authority; the native one starts in
 * about a millisecond where Node.js boots in 40 ms and more, which a harness's start pays in full.
 *
 * The build is the node's, once: `go build` with cgo off and `-trimpath`, from the standard library alone (no module
 * is fetched). Its folder is named by the sha256 of the sources, so a changed source builds anew; the binary's own
 * sha256 is written beside it and checked each time a node finds it, so a copy changed on disk is built again, never
 * run. Nodes starting together each build in a folder of their own and the first one's copy stays.
 * Run directly (`npm run forwarder:build`), it builds it where it is missing and prints which one a node runs.
 */
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { executableFile, projectRoot } from '../../common/paths';
import { resolveCommand } from '../../common/process-group';
import { sha256File } from './bwrap';

/** What a sandbox runs before its program when its network is its own. */
export type Forwarder =
  | { kind: 'native'; path: string; sha256: string }
  /** `why`: why not the native one, in words a person acts on. */
  | { kind: 'node'; node: string; script: string; why: string };

/** The native forwarder's file name, in its folder. */
export const NATIVE_FORWARDER = 'oz0-forwarder';

/** Where Go's own installer puts it: a node started by a service manager often has no /usr/local/go/bin on PATH. */
const GO_INSTALL = '/usr/local/go/bin/go';

/** A cold build (Go's standard library compiled into its cache) takes ~20 s on a busy 2-core machine. */
const BUILD_TIMEOUT_MS = 180_000;

export interface ForwarderLookup {
  /** The project's folder (its `native/forwarder/` and `.tools/`); oz0's own by default. */
  root?: string;
  /** The environment `go` is found in (`OZ0_GO`, else PATH) and built with. */
  env?: NodeJS.ProcessEnv;
  /** Where Go is looked for after PATH. */
  fallbacks?: string[];
  log?: (line: string) => void;
}

/** The sources the binary is built from: every file of `native/forwarder/`, by name. */
export function forwarderSources(root = projectRoot()): Map<string, Buffer> {
  const dir = path.join(root, 'native', 'forwarder');
  const files = fs.readdirSync(dir).filter((f) => f === 'go.mod' || f.endsWith('.go'));
  return new Map(files.sort().map((f) => [f, fs.readFileSync(path.join(dir, f))]));
}

/** The sha256 of the sources, names and bytes: the name of the folder their binary is built into. */
export function sourceDigest(sources: Map<string, Buffer>): string {
  const hash = createHash('sha256');
  for (const [name, bytes] of sources) hash.update(`${name}\0${bytes.length}\0`).update(bytes);
  return hash.digest('hex');
}

/** The folder the binary of these sources lives in. */
export function forwarderDir(root: string, digest: string): string {
  return path.join(root, '.tools', 'forwarder', digest.slice(0, 16));
}

/** Why the binary in `dir` is not one this node built (missing, or its bytes not those recorded); else undefined. */
export function builtCopyProblem(dir: string): string | undefined {
  const binary = path.join(dir, NATIVE_FORWARDER);
  if (!executableFile(binary)) return `${binary} is missing`;
  let recorded: string;
  try {
    recorded = fs.readFileSync(`${binary}.sha256`, 'utf8').trim();
  } catch {
    return `${binary}.sha256 is missing`;
  }
  const actual = sha256File(binary);
  return actual === recorded ? undefined : `${binary} has sha256 ${actual}, not the ${recorded} it was built with`;
}

/** The `go` this node builds with: `OZ0_GO`, else on PATH, else Go's own install folder; undefined when none. */
export function findGo(env: NodeJS.ProcessEnv = process.env, fallbacks = [GO_INSTALL]): string | undefined {
  if (env.OZ0_GO) return executableFile(env.OZ0_GO) ? env.OZ0_GO : undefined;
  return [resolveCommand('go', env.PATH ?? ''), ...fallbacks].find((p) => p.includes('/') && executableFile(p));
}

/** Failed builds, by folder: a process does not build again for every sandbox it starts (tests start many). */
const failures = new Map<string, string>();

/**
 * The forwarder a node's sandboxes run: the native one, built now if this source has no good binary yet, else the
 * Node.js one and why.
 */
export function provideForwarder(opts: ForwarderLookup = {}): Forwarder {
  const root = opts.root ?? projectRoot();
  let sources: Map<string, Buffer>;
  try {
    sources = forwarderSources(root);
  } catch (err) {
    return nodeForwarder(`the native forwarder's sources are not here (${(err as Error).message})`);
  }
  const dir = forwarderDir(root, sourceDigest(sources));
  const problem = builtCopyProblem(dir);
  if (problem === undefined) return native(dir);
  if (fs.existsSync(dir)) opts.log?.(`oz0's native forwarder is not the one it built (${problem}): building it again`);
  if (!failures.has(dir)) {
    try {
      buildForwarder(root, dir, opts);
    } catch (err) {
      failures.set(dir, (err as Error).message);
    }
  }
  return failures.has(dir) ? nodeForwarder(failures.get(dir)!) : native(dir);
}

function native(dir: string): Forwarder {
  const binary = path.join(dir, NATIVE_FORWARDER);
  return { kind: 'native', path: binary, sha256: fs.readFileSync(`${binary}.sha256`, 'utf8').trim() };
}

/** Builds `native/forwarder/` into `dir` (replacing a changed copy), recording the binary's sha256 beside it. */
export function buildForwarder(root: string, dir: string, opts: ForwarderLookup = {}): void {
  const env = opts.env ?? process.env;
  const go = findGo(env, opts.fallbacks);
  if (!go) {
    throw new Error(
      `Go is not installed (no ${env.OZ0_GO ? `OZ0_GO ${env.OZ0_GO}` : `go on PATH or at ${(opts.fallbacks ?? [GO_INSTALL]).join(', ') || 'a known place'}`}), so the native one cannot be built: install Go 1.22 or later (https://go.dev/dl) or set OZ0_GO, and a sandbox's start saves ~50 ms`,
    );
  }
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  const staging = fs.mkdtempSync(path.join(path.dirname(dir), '.build-'));
  try {
    opts.log?.(`building oz0's native forwarder with ${go} into ${dir}`);
    const binary = path.join(staging, NATIVE_FORWARDER);
    const cache =
      env.GOCACHE || env.XDG_CACHE_HOME || env.HOME ? {} : { GOCACHE: path.join(os.tmpdir(), 'oz0-go-cache') };
    const run = spawnSync(go, ['build', '-trimpath', '-ldflags=-s -w', '-o', binary, '.'], {
      cwd: path.join(root, 'native', 'forwarder'),
      // The machine's Go as it is (no toolchain fetched), nothing from a module proxy, a static binary.
      env: { ...env, ...cache, CGO_ENABLED: '0', GOTOOLCHAIN: 'local', GOPROXY: 'off' },
      encoding: 'utf8',
      timeout: BUILD_TIMEOUT_MS,
    });
    if (run.status !== 0 || !executableFile(binary)) {
      const said = `${run.stderr ?? ''}${run.error ? run.error.message : ''}`.trim().split('\n').slice(-3).join(' ');
      throw new Error(`${go} build of native/forwarder failed (${said || `exit ${run.status}`})`);
    }
    fs.writeFileSync(`${binary}.sha256`, `${sha256File(binary)}\n`);
    fs.chmodSync(staging, 0o755);
    fs.rmSync(dir, { recursive: true, force: true });
    try {
      fs.renameSync(staging, dir);
    } catch (err) {
      // Another node built it meanwhile: theirs stays when it is whole.
      if (builtCopyProblem(dir) !== undefined) throw err;
    }
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
  }
}

/** The Node.js forwarder (./forwarder.ts), run by this node's own Node.js, and why it is the one. */
export function nodeForwarder(why: string): Forwarder {
  return { kind: 'node', node: process.execPath, script: nodeScript(), why };
}

/** The Node.js forwarder's compiled script (the sources run under ts-jest, the node from dist/). */
function nodeScript(): string {
  return __filename.endsWith('.ts')
    ? path.join(projectRoot(), 'dist', 'activities', 'sandbox', 'forwarder.js')
    : path.join(__dirname, 'forwarder.js');
}

/** I7: which forwarder, in words, for the node's start line. */
export function describeForwarder(f: Forwarder): string {
  return f.kind === 'native'
    ? `oz0's native forwarder at ${f.path} (Go, built from native/forwarder, sha256 ${f.sha256.slice(0, 12)}…)`
    : `the Node.js forwarder (${f.script}): ${f.why}`;
}

/** The forwarder's own command, which the sandbox sees (bound read-only) and runs before its routes and `--`. */
export function forwarderCommand(f: Forwarder): string[] {
  return f.kind === 'native' ? [f.path] : [f.node, f.script];
}

if (require.main === module) console.log(describeForwarder(provideForwarder({ log: (line) => console.error(line) })));
