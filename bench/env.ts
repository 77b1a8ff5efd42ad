/**
 * One dev server for a whole bench run, and the two things measured on it side by side: an oz0 node (in this
 * process, or as an `oz0 worker` process) and a bare Temporal worker whose activity makes the same MCP call.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import type { Logger } from 'pino';
import { parseConfig } from '../common/config';
import { processDataOf } from '../data';
import type { LoadedConfig } from '../common/config';
import { startDevServer } from '../worker/dev-server';
import type { DevServer } from '../worker/dev-server';
import { createLogger } from '../common/logger';
import { createNode, installRuntime } from '../worker/node';
import type { Oz0Node } from '../worker/node';
import { projectRoot } from '../common/paths';
import { findTemporalCli } from '../worker/temporal-cli';
import { bareBundleCode, runBareWorker } from './bare/worker';
import type { BareWorkerOptions } from './bare/worker';
import { killTree, stderrLine } from '../worker/processes';
import { readControl } from '../deploy/local-cluster/control';
import type { BareWorker } from './bare/worker';

export interface BenchEnv {
  root: string;
  /** A scratch folder for this run. */
  dir: string;
  /** The payload keys every node of this run seals with (D4), and its client opens with. */
  keys: string;
  cli: string | undefined;
  server: DevServer;
  connection: Connection;
  client: Client;
  logger: Logger;
  /** The example reader's stdio entry point (echo, sleep). */
  reader: string;
  /** How cancels reached the last node this run started (issue 26): `push` or `heartbeat`. */
  cancels: string;
  /** A workflow id no other job of this run has. */
  id(prefix: string): string;
  close(): Promise<void>;
}

/**
 * `temporal`: a running Temporal to measure on instead of a dev server of this run's own, e.g. `npm run cluster`'s
 * (its server's pid, for the CPU it spends, comes from the cluster's control file). `dynamicConfig`: the dev
 * server's, instead of oz0's raised queue readers (`{}` is the server's own defaults).
 */
export async function openBenchEnv(
  temporal?: string,
  opts: { dynamicConfig?: Record<string, unknown> } = {},
): Promise<BenchEnv> {
  const root = projectRoot();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-bench-'));
  const cli = temporal ? undefined : findTemporalCli();
  const logger = createLogger({ level: 'warn' });
  // In memory: a SQLite file makes the dev server's own writes the bottleneck for oz0 and bare alike.
  const server: DevServer = temporal
    ? {
        address: temporal,
        namespace: 'default',
        pid: readControl(temporal)?.temporalPid ?? -1,
        stop: async () => undefined,
        exited: new Promise(() => undefined),
      }
    : await startDevServer({ cli, uiPort: false, dynamicConfig: opts.dynamicConfig });
  // The dev server runs in a process group of its own: a Ctrl-C at the terminal does not reach it.
  const release = async () => {
    await server.stop();
    fs.rmSync(dir, { recursive: true, force: true });
  };
  stopOnSignals(release);
  const connection = await Connection.connect({ address: server.address });
  // A cluster outlives a run: what one run's nodes sealed there (the all-tenants policy, a tenant's limiter) must open
  // in the next, so its key folder is kept with the project's state; a dev server of its own ends with the run.
  const keys = temporal ? path.join(root, '.oz0', 'bench-keys') : path.join(dir, 'keys');
  // The run's client opens what its nodes seal, with their keys, and writes plain: it starts bare workers' workflows
  // too, which have no codec (an oz0 node takes a plain spec, D6). No store: what it reads of big answers goes through
  // a job client of the node's own config.
  const seal = { folder: keys, newPayloads: 'plain' };
  const data = processDataOf({ ...parseConfig({ payloads: { store: 'off', seal } }), baseDir: root });
  const client = new Client({ connection, dataConverter: data.dataConverter });
  data.useClient(client);
  let n = 0;
  return {
    root,
    dir,
    keys,
    cli,
    server,
    connection,
    client,
    logger,
    reader: path.join(root, 'dist', 'examples', 'reader.js'),
    cancels: 'not yet known',
    id: (prefix) => `${prefix}-${process.pid}-${++n}`,
    async close() {
      openEnvs.delete(release);
      await connection.close();
      await release();
    },
  };
}

/** What a signal must stop: each open run's dev server (its node and bare workers share the bench's group). */
const openEnvs = new Set<() => Promise<void>>();
let signalsHeard = false;

function stopOnSignals(stop: () => Promise<void>): void {
  if (!signalsHeard) {
    signalsHeard = true;
    for (const [signal, code] of [
      ['SIGINT', 130],
      ['SIGTERM', 143],
    ] as const) {
      process.once(signal, () => {
        process.stderr.write(`bench: ${signal}: stopping its Temporal dev server, then exiting\n`);
        void Promise.allSettled([...openEnvs].map((f) => f())).then(() => process.exit(code));
      });
    }
  }
  openEnvs.add(stop);
}

/** A config for a node of this run: its own task queue, the reader as a plugin server, `extra` merged on top. */
export function benchConfig(env: BenchEnv, taskQueue: string, extra: Record<string, unknown> = {}): LoadedConfig {
  return { ...parseConfig(benchConfigInput(env, taskQueue, extra)), baseDir: env.root, source: 'bench' };
}

/**
 * The same config as a file, for an `oz0 worker` process of this run; `readerEnv` adds to the reader's environment.
 * Returns the file's path.
 */
export function writeBenchConfig(
  env: BenchEnv,
  taskQueue: string,
  extra: Record<string, unknown> = {},
  readerEnv: Record<string, string> = {},
): string {
  const file = path.join(env.dir, `${taskQueue}.config.json`);
  fs.writeFileSync(file, JSON.stringify(benchConfigInput(env, taskQueue, extra, readerEnv)));
  return file;
}

function benchConfigInput(
  env: BenchEnv,
  taskQueue: string,
  extra: Record<string, unknown>,
  readerEnv: Record<string, string> = {},
): Record<string, unknown> {
  const { node, servers, payloads, ...rest } = extra as { node?: object; servers?: object; payloads?: object };
  const state = path.join(env.dir, `${taskQueue}.json`);
  return {
    temporal: { address: env.server.address, taskQueue },
    servers: {
      reader: { command: 'node', args: [env.reader], env: { READER_STATE: state, ...readerEnv } },
      ...servers,
    },
    node: { stateDir: path.join(env.dir, `state-${taskQueue}`), ...node },
    payloads: { seal: { folder: env.keys }, ...payloads },
    ...rest,
  };
}

/** Runs an oz0 node in this process for the length of `fn`. */
export async function withNode<T>(env: BenchEnv, config: LoadedConfig, fn: (node: Oz0Node) => Promise<T>): Promise<T> {
  const node = await createNode({ config, logger: env.logger });
  const running = node.run();
  try {
    // Measured as the node runs for good: once it knows how cancels reach it (issue 26), which the tables say.
    await node.route.decided;
    env.cancels = node.route.way;
    return await fn(node);
  } finally {
    await node.shutdown();
    await running;
  }
}

/**
 * The baseline, in this process: a plain Temporal worker (same slots as the oz0 node) calling the reader. `extra`:
 * its identity, a deployment version (Worker Versioning) or no eager activities, for issue 56's comparisons.
 */
export function startBareWorker(
  env: BenchEnv,
  taskQueue: string,
  slots = 100,
  extra: Pick<BareWorkerOptions, 'identity' | 'deployment' | 'eagerActivities'> = {},
): Promise<BareWorker> {
  // Before the first worker of this process: the Temporal runtime logs through pino at warn, as a node's does.
  // Not sooner: an installed runtime that no worker ever used keeps the process from exiting.
  installRuntime(env.logger);
  return runBareWorker({
    address: env.server.address,
    taskQueue,
    reader: env.reader,
    // Its own reader's file: two workers may serve one queue (two builds).
    readerEnv: { READER_STATE: path.join(env.dir, `${taskQueue}${extra.identity ? `-${extra.identity}` : ''}.json`) },
    slots,
    ...extra,
  });
}

/**
 * The baseline as a process of its own (bare/worker.ts), ready to take `taskQueue`'s tasks; its bundle is built here,
 * so no webpack runs in it. `nodeFlags` go to its node (e.g. `--cpu-prof`), `vars` to its environment.
 */
export async function startBareProcess(
  env: BenchEnv,
  taskQueue: string,
  opts: {
    slots: number;
    readerEnv?: Record<string, string>;
    nodeFlags?: string[];
    vars?: Record<string, string>;
    /** Where its stdout goes (e.g. `--trace-gc`'s lines); else dropped. */
    logFile?: string;
    /** Another MCP server's entry point than the reader's (D7: the pages server). */
    server?: string;
    /** D7: a folder for its External Storage. */
    store?: string;
  },
): Promise<ChildProcess> {
  const bundlePath = path.join(env.dir, 'bare-bundle.js');
  if (!fs.existsSync(bundlePath)) fs.writeFileSync(bundlePath, await bareBundleCode());
  const options: BareWorkerOptions = {
    address: env.server.address,
    taskQueue,
    reader: opts.server ?? env.reader,
    readerEnv: { READER_STATE: path.join(env.dir, `${taskQueue}-seen.json`), ...opts.readerEnv },
    slots: opts.slots,
    bundlePath,
    ...(opts.store ? { store: opts.store } : {}),
  };
  const proc = spawn(
    process.execPath,
    [...(opts.nodeFlags ?? []), path.join(env.root, 'dist', 'bench', 'bare', 'worker.js'), JSON.stringify(options)],
    {
      stdio: ['ignore', opts.logFile ? fs.openSync(opts.logFile, 'a') : 'ignore', 'pipe'],
      env: { ...process.env, ...opts.vars },
    },
  );
  try {
    await stderrLine(proc, /bare worker ready/, 'bare worker', 60_000);
  } catch (err) {
    if (proc.exitCode === null) killTree(proc.pid!);
    throw err;
  }
  return proc;
}

/** `n` echo steps for an oz0 job. */
export function echoSteps(n: number, tag = 't') {
  return Array.from({ length: n }, (_, i) => ({ call: 'reader.echo', args: { text: `${tag}${i}` } }));
}
