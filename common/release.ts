/**
 * What a node says it is (issue 56): its *release*, the package's version and the git commit it was built from, and
 * its *build id*, a digest of the workflow code it runs (worker/bundle.ts makes it). It says both at start, in
 * `oz0 worker --version`, in its series' labels and on each attempt's span, so an operator sees which release ran what.
 *
 * The commit is read once, by `npm run build` (`node dist/common/release.js` writes dist/release.json), from the git
 * checkout the package is built in, or from `OZ0_COMMIT` where there is none (a Docker build: .git stays out of the
 * image). A build from `git archive` without either says its commit is unknown rather than guess. Run from its sources
 * (the tests), a node asks git itself: its code is the checkout's, edits included.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

const FROM_SOURCES = path.extname(__filename) === '.ts';
const ROOT = path.join(__dirname, FROM_SOURCES ? '..' : '../..');
/** Where the build writes the commit it was made from: next to the compiled code, shipped with it. */
export const RELEASE_FILE = path.join(ROOT, 'dist', 'release.json');

export interface Release {
  /** package.json's version. */
  version: string;
  /** The git commit the code was built from; undefined when unknown (no git checkout, no `OZ0_COMMIT`). */
  commit?: string;
  /** The checkout's tracked files differed from that commit when it was built. */
  dirty?: boolean;
  /**
   * One label value for all of it: `<version>+<commit's first 12>`, `.dirty` after it when the tree was; and
   * `<version>+unknown` when the commit is (semver's build metadata, which Prometheus and OpenTelemetry take as is).
   */
  name: string;
}

/** A node's release and the build id of the workflow code it runs. */
export interface NodeRelease extends Release {
  /** A digest of the node's workflow bundles (worker/bundle.ts): it changes exactly when that code does. */
  buildId: string;
}

/** The series' labels (and the runtime's global tags) a node's release puts on every series it serves. */
export function releaseLabels(release: NodeRelease): { release: string; build_id: string } {
  return { release: release.name, build_id: release.buildId };
}

/** `0.1.0+97244f1c3a2b (commit 97244f1c…), build id 5d41402abc4b`: one line for a start line or `--version`. */
export function releaseText(release: NodeRelease): string {
  const commit = release.commit
    ? `commit ${release.commit}${release.dirty ? ', with uncommitted changes' : ''}`
    : 'commit unknown: built without git';
  return `${release.name} (${commit}), build id ${release.buildId}`;
}

/** Characters of each digest kept: 48 bits, as short as a person compares by eye and far from colliding. */
const BUILD_ID_LENGTH = 12;

/** The sha256 of a workflow bundle's code, in hex: the same for its file's bytes as for the string written there. */
export function codeDigest(code: string | Buffer): string {
  return createHash('sha256').update(code).digest('hex');
}

/** A build id from the digests of the code it names, in order, shortened. */
export function buildIdOf(digests: string[]): string {
  return createHash('sha256').update(digests.join('\n')).digest('hex').slice(0, BUILD_ID_LENGTH);
}

const COMMIT = /^[0-9a-f]{7,64}$/;

function nameOf(version: string, commit: string | undefined, dirty: boolean | undefined): string {
  return `${version}+${commit ? commit.slice(0, BUILD_ID_LENGTH) : 'unknown'}${dirty ? '.dirty' : ''}`;
}

function git(args: string[]): string {
  return execFileSync('git', ['-C', ROOT, ...args], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'ignore'],
    timeout: 10_000,
  }).trim();
}

/**
 * The commit of the checkout the package sits in, when the package is that checkout's top (a package installed inside
 * someone else's repository is not their commit), and whether its tracked files differ from it.
 */
function commitHere(): Pick<Release, 'commit' | 'dirty'> {
  const given = process.env.OZ0_COMMIT?.trim().toLowerCase();
  if (given) {
    if (!COMMIT.test(given)) throw new Error(`OZ0_COMMIT: ${given} is not a git commit (7 to 64 hex digits)`);
    return { commit: given };
  }
  try {
    const [top, commit] = git(['rev-parse', '--show-toplevel', 'HEAD']).split('\n');
    if (fs.realpathSync(top) !== fs.realpathSync(ROOT) || !COMMIT.test(commit)) return {};
    return { commit, dirty: git(['status', '--porcelain', '--untracked-files=no']) !== '' };
  } catch {
    // No git, or no checkout here (`git archive`, a package from the registry).
    return {};
  }
}

function packageVersion(): string {
  return (JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { version: string }).version;
}

let read: Release | undefined;

/** This process's release: from dist/release.json as the build wrote it, or from git when run from the sources. */
export function readRelease(): Release {
  if (read) return read;
  const version = packageVersion();
  let found: Pick<Release, 'commit' | 'dirty'> = {};
  if (FROM_SOURCES) found = commitHere();
  else {
    try {
      const file = JSON.parse(fs.readFileSync(RELEASE_FILE, 'utf8')) as Pick<Release, 'commit' | 'dirty'>;
      if (typeof file.commit === 'string' && COMMIT.test(file.commit))
        found = { commit: file.commit, dirty: !!file.dirty };
    } catch {
      // A build from before release.json: its commit is not known.
    }
  }
  read = { version, ...found, name: nameOf(version, found.commit, found.dirty) };
  return read;
}

/** `npm run build`'s step: the commit this build is made from, into dist/release.json. */
function main(): void {
  const found = commitHere();
  fs.mkdirSync(path.dirname(RELEASE_FILE), { recursive: true });
  fs.writeFileSync(RELEASE_FILE, `${JSON.stringify(found)}\n`);
  process.stdout.write(`release: ${nameOf(packageVersion(), found.commit, found.dirty)}\n`);
}

if (require.main === module) {
  try {
    main();
  } catch (err) {
    process.stderr.write(`oz0 build: ${(err as Error).message}\n`);
    process.exit(1);
  }
}
