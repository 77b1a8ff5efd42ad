/**
 * A script's run of the local cluster: its state folder (`.oz0/cluster`) and a log of the script's own there, what a
 * run before left stopped first, the cluster's pids written for the next run to find, and all of it stopped at the
 * end. `npm run cluster` (deploy/cluster.ts) and the chaos suite on the cluster (bench/chaos/ `--cluster`) run it so.
 */
import fs from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import { createLogger } from '../../common/logger';
import type { Logger } from '../../common/logger';
import { projectRoot } from '../../common/paths';
import { startLocalCluster } from './index';
import type { ClusterOptions, LocalCluster } from './index';
import { defaultStateDir } from './control';
import { stopLeftovers, writePids } from './leftovers';

export interface ClusterRun {
  root: string;
  stateDir: string;
  logger: Logger;
  /** A line for the person watching (stderr, `cluster: …`) and for the log. */
  say: (line: string) => void;
}

/** The state folder and the script's log in it, `logs/cluster.log`. */
export function clusterRun(): ClusterRun {
  const root = projectRoot();
  const stateDir = defaultStateDir(root);
  fs.mkdirSync(path.join(stateDir, 'logs'), { recursive: true });
  // Synchronous: a few lines, and an exit right after start-up must not find the file not yet open.
  const logger = createLogger({
    destination: pino.destination({ dest: path.join(stateDir, 'logs', 'cluster.log'), sync: true }),
  });
  const say = (line: string) => {
    logger.info(line);
    process.stderr.write(`cluster: ${line}\n`);
  };
  return { root, stateDir, logger, say };
}

/** Starts the cluster (after stopping what a run before left), hands it to `use`, then stops it all. */
export async function onLocalCluster<T>(
  run: ClusterRun,
  opts: Pick<ClusterOptions, 'nodes' | 'ui' | 'observe'>,
  use: (cluster: LocalCluster) => Promise<T>,
): Promise<T> {
  await stopLeftovers(run.stateDir, run.say);
  const cluster = await startLocalCluster({ root: run.root, stateDir: run.stateDir, say: run.say, ...opts });
  writePids(run.stateDir);
  try {
    return await use(cluster);
  } finally {
    await cluster.stop();
    for (const file of ['pids.json', 'control.json']) fs.rmSync(path.join(run.stateDir, file), { force: true });
  }
}
