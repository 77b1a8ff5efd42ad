/**
 * A whole oz0 cluster on 127.0.0.1, built from the same settings as docker-compose.yml: PostgreSQL in
 * `<state>/pg`, the Temporal server (from its Go module) with SQL visibility, the `default` namespace, the
 * Web UI when its server could be built, the reader example as a remote MCP server (compose's `search`), the payload
 * store (SeaweedFS's S3 API, from its Go module: compose's `s3`), and N
 * `oz0 worker` processes on deploy/oz0.cluster.json. Every process logs to `<state>/logs/`.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { killTree, startHttpExample, startWorker } from '../../worker/processes';
import { ensureTools } from './go-tools';
import type { ClusterTools } from './go-tools';
import { nodeConfig } from './node-config';
import { startPostgres } from './postgres';
import type { Postgres } from './postgres';
import { dynamicConfigFile, readServerSettings } from './settings';
import {
  PORT_NAMES,
  ensureNamespace,
  serverConfig,
  setUpSchemas,
  startTemporalServer,
  validateDynamicConfig,
} from './temporal-server';
import type { ServerPorts, TemporalServer } from './temporal-server';
import { startUi } from './ui';
import { startObservability } from './observe';
import { ensureSeaweedfs, startSeaweedfs } from './seaweedfs';
import type { RunningS3 } from './seaweedfs';
import type { Observability } from './observe';

export interface ClusterOptions {
  root: string;
  stateDir: string;
  nodes: number;
  ui: boolean;
  /** O1-O2: Jaeger receiving the nodes' spans, Prometheus scraping their /metrics (./observe.ts). */
  observe?: boolean;
  say: (line: string) => void;
}

export interface ClusterNode {
  name: string;
  proc: ChildProcess;
  logFile: string;
}

export interface LocalCluster {
  stateDir: string;
  logsDir: string;
  address: string;
  namespace: string;
  uiUrl?: string;
  /** With `observe`: Jaeger's UI and Prometheus'. */
  observability?: { jaegerUrl: string; prometheusUrl: string };
  postgres: Postgres;
  temporal: TemporalServer;
  /** D2: the payload store (SeaweedFS's S3 API), and the identity the nodes use. */
  s3: RunningS3;
  /** The config every node runs on, and the one to give the CLI (`oz0 job start --config …`). */
  configFile: string;
  /** Where the example servers record what they received (OZ0_RECEIVED_LOG). */
  receivedLog: string;
  ledgerFile: string;
  nodes: ClusterNode[];
  addNode(): Promise<ClusterNode>;
  /** Nodes first (SIGTERM, their grace), then the UI, the search server, Temporal, PostgreSQL (fast shutdown). */
  stop(): Promise<void>;
}

const PortsSchema = z.strictObject({
  postgres: z.number().int(),
  ui: z.number().int(),
  temporal: z.strictObject(
    Object.fromEntries(PORT_NAMES.map((n) => [n, z.number().int()])) as Record<keyof ServerPorts, z.ZodNumber>,
  ),
});
type Ports = z.infer<typeof PortsSchema>;

async function isFree(port: number): Promise<boolean> {
  const net = await import('node:net');
  return new Promise((resolve) => {
    const srv = net.createServer().once('error', () => resolve(false));
    srv.listen(port, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
}

/**
 * A free port below 32768: Temporal keeps a member's membership port in a PostgreSQL smallint column
 * (cluster_membership.rpc_port), so the kernel's ephemeral ports (32768 and up) would make the server exit at start.
 */
async function freeLowPort(taken: Set<number>): Promise<number> {
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 12000);
    if (!taken.has(port) && (await isFree(port))) {
      taken.add(port);
      return port;
    }
  }
}

/** The ports of the last run when all are still free (a restart finds its cluster where it was), else new ones. */
async function choosePorts(file: string): Promise<Ports> {
  try {
    const saved = PortsSchema.parse(JSON.parse(fs.readFileSync(file, 'utf8')));
    const all = [saved.postgres, saved.ui, ...Object.values(saved.temporal)];
    if ((await Promise.all(all.map(isFree))).every(Boolean)) return saved;
  } catch {
    // first run, or a file from another version: choose afresh
  }
  const taken = new Set<number>();
  const temporal = {} as ServerPorts;
  for (const name of PORT_NAMES) temporal[name] = await freeLowPort(taken);
  const ports = { postgres: await freeLowPort(taken), ui: await freeLowPort(taken), temporal };
  fs.writeFileSync(file, `${JSON.stringify(ports, null, 2)}\n`);
  return ports;
}

/** D5: the codec server of `oz0 inbox` on its default port, as an operator runs it beside the cluster. */
const INBOX_CODEC = 'http://127.0.0.1:8090/codec';

export async function startLocalCluster(opts: ClusterOptions): Promise<LocalCluster> {
  const { root, stateDir, say } = opts;
  const logsDir = path.join(stateDir, 'logs');
  fs.mkdirSync(logsDir, { recursive: true });
  const log = (name: string) => path.join(logsDir, `${name}.log`);
  const settings = readServerSettings(root);
  const tools: ClusterTools = await ensureTools({ root, say, logFile: log('go-build') });
  const weed = await ensureSeaweedfs(root, say);
  await validateDynamicConfig(tools, dynamicConfigFile(root));
  const ports = await choosePorts(path.join(stateDir, 'ports.json'));
  const stops: Array<() => Promise<void>> = [];
  const stopAll = async () => {
    for (const stop of stops.splice(0).reverse()) await stop().catch((err) => say(`stopping: ${err}`));
  };
  try {
    say(`starting PostgreSQL in ${path.join(stateDir, 'pg')} on 127.0.0.1:${ports.postgres}`);
    const postgres = await startPostgres({
      dataDir: path.join(stateDir, 'pg'),
      logFile: log('postgres'),
      port: ports.postgres,
      user: 'temporal',
    });
    stops.push(() => postgres.stop());
    say('setting up the temporal and temporal_visibility schemas');
    await setUpSchemas(tools, postgres, log('schema'));

    const address = `127.0.0.1:${ports.temporal.frontend}`;
    const configFile = path.join(stateDir, 'temporal.yaml');
    const config = serverConfig(settings, ports.temporal, postgres, dynamicConfigFile(root));
    fs.writeFileSync(configFile, `${JSON.stringify(config, null, 2)}\n`);
    say(`starting the Temporal server at ${address} (${settings.numHistoryShards} history shards)`);
    const temporal = await startTemporalServer({ tools, configFile, logFile: log('temporal'), address });
    stops.push(() => temporal.stop());
    await ensureNamespace(address, settings);

    let uiUrl: string | undefined;
    if (opts.ui && tools.ui) {
      const ui = await startUi({
        binary: tools.ui,
        dir: path.join(stateDir, 'ui'),
        port: ports.ui,
        temporalAddress: address,
        namespace: settings.namespace,
        logFile: log('ui'),
        // D5: the inbox an operator runs beside the cluster (`oz0 inbox --temporal-ui <ui>`, on its default port)
        // decodes what the signed-in person may read; without it, the UI shows the payloads sealed.
        codecEndpoint: INBOX_CODEC,
      });
      stops.push(() => ui.stop());
      uiUrl = ui.url;
      say(
        `the Temporal UI opens sealed payloads through ${INBOX_CODEC} (oz0 inbox, its people signed in: docs/data.md)`,
      );
    }

    const receivedLog = path.join(stateDir, 'received.jsonl');
    // Compose's LEDGER_FILE, on its shared `ledger` volume: the same name in the cluster's own ledger folder.
    const ledgerFile = path.join(stateDir, 'ledger', 'ledger.db');
    const search = await startHttpExample(
      path.join(root, 'dist', 'examples', 'reader.js'),
      { READER_STATE: path.join(stateDir, 'search-seen.json'), OZ0_RECEIVED_LOG: receivedLog },
      { logFile: log('search'), detached: true },
    );
    stops.push(() => search.close());

    // D2: the payload store, SeaweedFS's S3 API; its data and its one identity kept in the cluster's folder.
    const s3 = await startSeaweedfs(weed, path.join(stateDir, 's3'));
    stops.push(() => s3.stop());
    say(`the payload store: SeaweedFS's S3 API at ${s3.endpoint}, bucket ${s3.bucket}`);
    const nodeEnv = {
      SEARCH_TOKEN: 'Bearer example-token',
      OZ0_S3_ACCESS_KEY: s3.accessKeyId,
      OZ0_S3_SECRET_KEY: s3.secretAccessKey,
    };
    let observability: Observability | undefined;
    if (opts.observe) {
      say('starting Jaeger and Prometheus (--observe)');
      observability = await startObservability({ root, stateDir, logsDir, say });
      stops.push(() => observability!.stop());
    }
    const configFor = (name: string) => {
      const file = path.join(stateDir, name === '' ? 'oz0.config.json' : `oz0.${name}.json`);
      const state = path.join(stateDir, 'nodes', name || 'cli');
      const input = nodeConfig(root, {
        address,
        namespace: settings.namespace,
        state,
        ledgerFile,
        search: search.url,
        s3: s3.endpoint,
        receivedLog,
        keys: path.join(stateDir, 'keys'),
      });
      fs.writeFileSync(file, `${JSON.stringify(input, null, 2)}\n`);
      return file;
    };
    const nodes: ClusterNode[] = [];
    const workers: ChildProcess[] = [];
    let named = 0;
    const addNode = async () => {
      const name = `node-${++named}`;
      const logFile = log(name);
      const env = { ...nodeEnv, ...(await observability?.nodeEnv()) };
      const { proc } = await startWorker(configFor(name), name, workers, { logFile, env, detached: true });
      const node = { name, proc, logFile };
      nodes.push(node);
      return node;
    };
    stops.push(async () => {
      // SIGTERM: each node stops taking calls and gives running ones its grace; kill -9 only if it overstays.
      await Promise.all(
        workers.map(async (w) => {
          if (w.exitCode !== null || w.signalCode !== null) return;
          const exited = new Promise((resolve) => w.once('exit', resolve));
          w.kill('SIGTERM');
          const timer = setTimeout(() => killTree(w.pid!), 30_000);
          await exited;
          clearTimeout(timer);
        }),
      );
    });
    const configFile0 = configFor('');
    for (let i = 0; i < opts.nodes; i++) {
      const node = await addNode();
      say(`started ${node.name} (pid ${node.proc.pid})`);
    }
    return {
      stateDir,
      logsDir,
      address,
      namespace: settings.namespace,
      uiUrl,
      ...(observability
        ? { observability: { jaegerUrl: observability.jaegerUrl, prometheusUrl: observability.prometheusUrl } }
        : {}),
      postgres,
      temporal,
      s3,
      configFile: configFile0,
      receivedLog,
      ledgerFile,
      nodes,
      addNode,
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}
