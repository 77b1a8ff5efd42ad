/**
 * The tools oz0 installs from PyPI into the project's `.tools/` on a fresh machine (the Temporal CLI, bubblewrap), at
 * pinned versions: pip, run by the machine's `python3` (else `python`). One way to PyPI for all of them, so what pip
 * is told (a mirror in `PIP_INDEX_URL`, a proxy, pip.conf) holds for each.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { executableFile } from '../common/paths';

/** `command` as found in the folders of a PATH, or undefined. */
export function onPath(command: string, pathEnv: string): string | undefined {
  for (const dir of pathEnv.split(path.delimiter)) {
    if (dir && executableFile(path.join(dir, command))) return path.join(dir, command);
  }
  return undefined;
}

export interface PipOptions {
  env?: NodeJS.ProcessEnv;
  /** Told what pip is about to do, before each interpreter tried. */
  log?: (line: string) => void;
}

export class PipError extends Error {
  override name = 'PipError';
}

/**
 * Runs `<python> -m pip <args>` with each interpreter on PATH until one succeeds and `done()` says it did what was
 * asked; throws {@link PipError} with each one's last words when none did.
 */
export function runPip(what: string, args: string[], done: () => boolean, opts: PipOptions = {}): void {
  const env = opts.env ?? process.env;
  const log = opts.log ?? (() => undefined);
  const failures: string[] = [];
  for (const python of ['python3', 'python']) {
    if (!onPath(python, env.PATH ?? '')) continue;
    log(what);
    try {
      execFileSync(python, ['-m', 'pip', ...args, '--quiet', '--disable-pip-version-check'], {
        stdio: ['ignore', 'ignore', 'pipe'],
        env: { ...env, PIP_ROOT_USER_ACTION: 'ignore' },
        timeout: 600_000,
      });
    } catch (err) {
      const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim().split('\n').at(-1);
      failures.push(`${python}: ${stderr || (err as Error).message.split('\n')[0]}`);
      continue;
    }
    if (done()) return;
    failures.push(`${python}: pip succeeded, but what it was asked for is not there`);
  }
  throw new PipError(failures.length > 0 ? failures.join('; ') : 'no python3 or python on PATH to run pip');
}

/** `pip install --target`: a package and nothing beside it in `target` (a folder of its own under `.tools/`). */
export function pipInstall(
  what: string,
  requirement: string,
  target: string,
  done: () => boolean,
  opts: PipOptions = {},
  extra: string[] = [],
): void {
  runPip(
    what,
    ['install', '--no-warn-script-location', '--upgrade', ...extra, '--target', target, requirement],
    done,
    opts,
  );
}
