/** The Temporal server the chaos faults are thrown at: a dev server of the run's own, or the local cluster's. */
import path from 'node:path';
import { freePort, startDevServer } from '../../worker/dev-server';
import type { DevServer } from '../../worker/dev-server';
import type { LocalCluster } from '../../deploy/local-cluster';
import { sleep } from '../common';

export interface ChaosServer {
  address: string;
  kind: string;
  /** kill -9, waiting for the exit. */
  kill(): Promise<void>;
  start(): Promise<void>;
  /** PostgreSQL: fast shutdown, `pauseMs` down, started again (the cluster only). */
  restartDatabase?(pauseMs: number): Promise<void>;
  close(): Promise<void>;
}

/** A dev server on a SQLite file in `dir`, so a kill and a start find the same history. */
export async function devServerChaos(dir: string, cli: string | undefined): Promise<ChaosServer> {
  const serverOpts = {
    cli,
    dbFile: path.join(dir, 'temporal.db'),
    port: await freePort(),
    uiPort: false as const,
    logFile: path.join(dir, 'temporal.log'),
  };
  let server: DevServer = await startDevServer(serverOpts);
  return {
    address: server.address,
    kind: 'dev server',
    async kill() {
      try {
        process.kill(-server.pid, 'SIGKILL');
      } catch {
        process.kill(server.pid, 'SIGKILL');
      }
      await server.exited;
    },
    async start() {
      server = await startDevServer(serverOpts);
    },
    close: () => server.stop(),
  };
}

/** The local cluster's real Temporal server and its PostgreSQL. */
export function clusterChaos(cluster: LocalCluster): ChaosServer {
  return {
    address: cluster.address,
    kind: 'local cluster',
    kill: () => cluster.temporal.kill(),
    start: () => cluster.temporal.start(),
    async restartDatabase(pauseMs) {
      await cluster.postgres.stop();
      await sleep(pauseMs);
      await cluster.postgres.start();
    },
    // The cluster is its caller's to stop (onLocalCluster, in main).
    close: async () => undefined,
  };
}
