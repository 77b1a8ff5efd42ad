/**
 * The Temporal server of the local cluster, from its Go build: its config (written from
 * deploy/temporal/settings.json, the shared dynamic config and this cluster's ports), the schemas applied with the
 * SQL tool, the process (all four services in one, as the module's development-postgres12.yaml runs them), and the
 * `default` namespace.
 */
import { execFile, spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { status as grpcStatus } from '@grpc/grpc-js';
import type { ClusterTools } from './go-tools';
import { retentionSeconds } from './settings';
import type { ServerSettings } from './settings';

/** Every port the server listens on: gRPC and membership per service, the frontend's HTTP API. */
export interface ServerPorts {
  frontend: number;
  frontendMembership: number;
  frontendHttp: number;
  history: number;
  historyMembership: number;
  matching: number;
  matchingMembership: number;
  worker: number;
  workerMembership: number;
}
export const PORT_NAMES: Array<keyof ServerPorts> = [
  'frontend',
  'frontendMembership',
  'frontendHttp',
  'history',
  'historyMembership',
  'matching',
  'matchingMembership',
  'worker',
  'workerMembership',
];

export interface Database {
  port: number;
  user: string;
}

const DATABASES = { default: 'temporal', visibility: 'temporal_visibility' } as const;

/** The server's config file (JSON, which its YAML loader reads as YAML). */
export function serverConfig(
  settings: ServerSettings,
  ports: ServerPorts,
  db: Database,
  dynamicConfigFile: string,
): Record<string, unknown> {
  const store = (databaseName: string, maxConns: number) => ({
    sql: {
      pluginName: 'postgres12',
      databaseName,
      connectAddr: `127.0.0.1:${db.port}`,
      connectProtocol: 'tcp',
      user: db.user,
      password: '',
      maxConns,
      maxIdleConns: maxConns,
      maxConnLifetime: '1h',
    },
  });
  const rpc = (grpcPort: number, membershipPort: number, extra: object = {}) => ({
    rpc: { grpcPort, membershipPort, bindOnLocalHost: true, ...extra },
  });
  return {
    log: { stdout: true, level: 'warn' },
    persistence: {
      defaultStore: 'postgres-default',
      visibilityStore: 'postgres-visibility',
      numHistoryShards: settings.numHistoryShards,
      datastores: {
        'postgres-default': store(DATABASES.default, 20),
        // SQL visibility: oz0's search attributes live in columns of this database, and list queries read it.
        'postgres-visibility': store(DATABASES.visibility, 10),
      },
    },
    global: { membership: { maxJoinDuration: '30s', broadcastAddress: '127.0.0.1' } },
    services: {
      frontend: rpc(ports.frontend, ports.frontendMembership, { httpPort: ports.frontendHttp }),
      history: rpc(ports.history, ports.historyMembership),
      matching: rpc(ports.matching, ports.matchingMembership),
      worker: rpc(ports.worker, ports.workerMembership),
    },
    clusterMetadata: {
      enableGlobalNamespace: false,
      failoverVersionIncrement: 10,
      masterClusterName: 'active',
      currentClusterName: 'active',
      clusterInformation: {
        active: {
          enabled: true,
          initialFailoverVersion: 1,
          rpcName: 'frontend',
          rpcAddress: `127.0.0.1:${ports.frontend}`,
        },
      },
    },
    dcRedirectionPolicy: { policy: 'noop' },
    dynamicConfigClient: { filepath: dynamicConfigFile, pollInterval: '10s' },
  };
}

function run(file: string, args: string[], logFile: string): Promise<void> {
  return new Promise((resolve, reject) => {
    execFile(file, args, (err, stdout, stderr) => {
      fs.appendFileSync(logFile, `$ ${path.basename(file)} ${args.join(' ')}\n${stdout}${stderr}`);
      if (err) reject(new Error(`${path.basename(file)} ${args.join(' ')} failed: see ${logFile}`));
      else resolve();
    });
  });
}

/**
 * The server's own check of the shared dynamic config: it reports an unknown key or a value of the wrong type as a
 * warning and exits 0, so the warnings are what fails here. A misspelt key would otherwise be ignored in silence.
 */
export async function validateDynamicConfig(tools: ClusterTools, file: string): Promise<void> {
  const out = await new Promise<string>((resolve, reject) =>
    execFile(tools.server, ['validate-dynamic-config', file], (err, stdout, stderr) =>
      err ? reject(err) : resolve(stdout + stderr),
    ),
  );
  const warnings = out.split('\n').filter((l) => /warning:/.test(l));
  if (warnings.length > 0) throw new Error(`${file}: ${warnings.map((w) => w.trim()).join('; ')}`);
}

/** Creates both databases and brings their schemas to the module's latest version (idempotent). */
export async function setUpSchemas(tools: ClusterTools, db: Database, logFile: string): Promise<void> {
  for (const [kind, database] of Object.entries(DATABASES)) {
    const base = ['--plugin', 'postgres12', '--ep', '127.0.0.1', '-p', String(db.port), '-u', db.user];
    base.push('--db', database);
    const marker = path.join(path.dirname(logFile), '..', `schema-${database}.done`);
    if (!fs.existsSync(marker)) {
      await run(tools.sql, [...base, 'create-database'], logFile);
      await run(tools.sql, [...base, 'setup-schema', '-v', '0.0'], logFile);
      fs.writeFileSync(marker, '');
    }
    const versioned = path.join(tools.schemaDir, 'postgresql', 'v12', kind === 'default' ? 'temporal' : 'visibility');
    await run(tools.sql, [...base, 'update-schema', '-d', path.join(versioned, 'versioned')], logFile);
  }
}

export interface TemporalServer {
  address: string;
  pid(): number;
  /** kill -9, waiting for the exit: a machine lost, no shutdown of any kind. */
  kill(): Promise<void>;
  /** SIGTERM (its own graceful stop), SIGKILL after 20 s. */
  stop(): Promise<void>;
  /** Starts it again with the same config and ports; resolves once the frontend answers. */
  start(): Promise<void>;
}

export async function startTemporalServer(opts: {
  tools: ClusterTools;
  configFile: string;
  logFile: string;
  address: string;
}): Promise<TemporalServer> {
  let child: ChildProcess | undefined;
  let exited: Promise<void> = Promise.resolve();
  const gone = () => !child || child.exitCode !== null || child.signalCode !== null;
  const start = async () => {
    const out = fs.openSync(opts.logFile, 'a');
    child = spawn(opts.tools.server, ['--config-file', opts.configFile, '--allow-no-auth', 'start'], {
      stdio: ['ignore', out, out],
      detached: true, // not reached by a Ctrl-C meant for the script, which stops the nodes first
    });
    fs.closeSync(out);
    const proc = child;
    exited = new Promise((resolve) => proc.once('exit', () => resolve()));
    const deadline = Date.now() + 120_000;
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`the Temporal server exited ${proc.exitCode}: see ${opts.logFile}`);
      try {
        const connection = await Connection.connect({ address: opts.address, connectTimeout: 1000 });
        try {
          await connection.workflowService.getSystemInfo({});
          return;
        } finally {
          await connection.close();
        }
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`the Temporal server did not answer at ${opts.address}: ${err}`);
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  };
  const kill = async () => {
    if (gone()) return;
    child!.kill('SIGKILL');
    await exited;
  };
  const stop = async () => {
    if (gone()) return;
    child!.kill('SIGTERM');
    const timer = setTimeout(() => child!.kill('SIGKILL'), 20_000);
    await exited;
    clearTimeout(timer);
  };
  await start();
  return { address: opts.address, pid: () => child?.pid ?? -1, kill, stop, start };
}

/** Registers the namespace (once) and waits until the frontend serves it. */
export async function ensureNamespace(address: string, settings: ServerSettings): Promise<void> {
  const connection = await Connection.connect({ address });
  try {
    const namespace = settings.namespace;
    try {
      await connection.workflowService.registerNamespace({
        namespace,
        workflowExecutionRetentionPeriod: msToTs(retentionSeconds(settings) * 1000),
      });
    } catch (err) {
      if ((err as { code?: number }).code !== grpcStatus.ALREADY_EXISTS) throw err;
    }
    // A new namespace reaches the frontend's cache within its refresh interval (about 10 s).
    const deadline = Date.now() + 60_000;
    for (;;) {
      try {
        await connection.workflowService.describeNamespace({ namespace });
        return;
      } catch (err) {
        if (Date.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 500));
      }
    }
  } finally {
    await connection.close();
  }
}
