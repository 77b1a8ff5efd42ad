/**
 * Shared test plumbing: a real dev server per test file, config for example servers, unique ids.
 *
 * OZ0_TEST_TEMPORAL=host:port runs the tests against that Temporal instead (a cluster from `npm run cluster`):
 * every test file connects to it, and a test that restarts the server has the cluster restart its own.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import type { WorkflowExecutionInfo, WorkflowHandle } from '@temporalio/client';
import type { JobTrace } from '../../model/job';
import { createNode } from '../../worker/node';
import { approveListing, readListing } from '../../client/approve';
import { policyTargetOf } from '../../common/policy-client';
import type { Oz0Node } from '../../worker/node';
import { parseConfig } from '../../common/config';
import type { LoadedConfig } from '../../common/config';
import { freePort, startDevServer } from '../../worker/dev-server';
import { restartClusterTemporal } from '../../deploy/local-cluster/control';
import type { DevServer } from '../../worker/dev-server';
import type { ChildProcess } from 'node:child_process';
import pino from 'pino';
import { startWorker as startWorkerProcess } from '../../worker/processes';
import { createLogger } from '../../common/logger';
import { logFileOf } from '../logs';
import { findTemporalCli } from '../../worker/temporal-cli';
import type { JobSpec } from '../../model/schemas';

export const ROOT = path.resolve(__dirname, '..', '..');
/** The nodes' logs go to this test file's log (test/logs.ts), not the terminal: a failing test prints its part. */
export const logger = createLogger({
  level: process.env.OZ0_TEST_LOG_LEVEL ?? 'info',
  destination: pino.destination({ dest: logFileOf(expect.getState().testPath ?? 'unknown'), sync: true, mkdir: true }),
});

/** Path of a compiled example server. */
export function example(name: string): string {
  return path.join(ROOT, 'dist', 'examples', `${name}.js`);
}

export function uniqueId(prefix: string): string {
  return `${prefix}-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
}

export function tmpDir(prefix = 'oz0-test-'): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), prefix));
}

export interface TestTemporal {
  server: DevServer;
  connection: Connection;
  client: Client;
  close(): Promise<void>;
}

/** The Temporal the tests run against instead of dev servers of their own, if any. */
export const externalTemporal = process.env.OZ0_TEST_TEMPORAL;

/** A server a test file does not own: it is never stopped here. */
function external(address: string): DevServer {
  return { address, namespace: 'default', pid: -1, stop: async () => undefined, exited: new Promise(() => undefined) };
}

/** A real Temporal dev server on free ports, headless, in memory; or the external one (OZ0_TEST_TEMPORAL). */
export async function startTemporal(): Promise<TestTemporal> {
  const server = externalTemporal
    ? external(externalTemporal)
    : await startDevServer({ cli: findTemporalCli({ install: false }), uiPort: false });
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection, namespace: server.namespace });
  return {
    server,
    connection,
    client,
    async close() {
      await connection.close();
      await server.stop();
    },
  };
}

/** A Temporal server a test may restart with its state kept. */
export interface RestartableTemporal {
  address: string;
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/**
 * A dev server on a SQLite file of its own, restarted on the same file; or, with OZ0_TEST_TEMPORAL, the cluster's
 * own server, which `npm run cluster` kills (kill -9) and starts again on request.
 */
export async function restartableTemporal(): Promise<RestartableTemporal> {
  if (externalTemporal) {
    const address = externalTemporal;
    return { address, restart: () => restartClusterTemporal(address), stop: async () => undefined };
  }
  const opts = {
    cli: findTemporalCli({ install: false }),
    dbFile: path.join(tmpDir(), 'temporal.db'),
    port: await freePort(),
    uiPort: false as const,
  };
  let server = await startDevServer(opts);
  return {
    address: server.address,
    async restart() {
      await server.stop();
      server = await startDevServer(opts);
    },
    stop: () => server.stop(),
  };
}

/** A config for tests: the given servers and tools, a unique task queue, state in a tmp folder. */
export function testConfig(address: string, input: Record<string, unknown>): LoadedConfig {
  const dir = tmpDir();
  const taskQueue = uniqueId('oz0-test');
  const config = parseConfig({
    ...input,
    temporal: { address, namespace: 'default', taskQueue },
    node: { heartbeatTimeoutSeconds: 10, ...(input.node as object | undefined), stateDir: path.join(dir, 'state') },
  });
  return { ...config, baseDir: ROOT, source: 'test' };
}

/** Path of a test fixture server. */
export function fixture(name: string): string {
  return path.join(ROOT, 'test', 'fixtures', name);
}

/** Starts a job on a fresh node for this config, waits for its trace, and shuts the node down. */
export async function runJob(
  temporal: TestTemporal,
  config: LoadedConfig,
  spec: JobSpec,
  workflowId = uniqueId('job'),
  /** Runs on the node before the job starts (e.g. to approve a listing: the policy workflow needs a node). */
  before?: () => Promise<unknown>,
): Promise<{ trace: JobTrace; handle: WorkflowHandle; node: Oz0Node }> {
  const node = await createNode({ config, logger });
  return node.runUntil(async () => {
    await before?.();
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId,
      args: [spec],
    });
    const trace: JobTrace = await handle.result();
    return { trace, handle, node };
  });
}

/** A run's own search attributes (Oz0…) by name, as Temporal recorded them (describe or a list's entry). */
export function attributesOf(run: Pick<WorkflowExecutionInfo, 'typedSearchAttributes'>): Record<string, unknown> {
  const oz0 = run.typedSearchAttributes.getAll().filter((p) => p.key.name.startsWith('Oz0'));
  return Object.fromEntries(oz0.map((p) => [p.key.name, p.value]));
}

/** Polls until check() returns a value (not undefined), or fails after timeoutMs. */
export async function eventually<T>(
  check: () => T | undefined | Promise<T | undefined>,
  timeoutMs = 20_000,
  what = 'condition',
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Whether a process is still there. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Approves a server's current listing for a tenant, as `oz0 policy approve --yes` does. */
export async function approve(temporal: TestTemporal, config: LoadedConfig, tenant: string, server: string) {
  const listing = await readListing(config, logger, server, tenant);
  return approveListing(policyTargetOf(config, temporal.client), tenant, listing);
}

export { descendants, killTree } from '../../worker/processes';

/**
 * A config for nodes run as processes of their own (startWorker): written to a file in a folder of its own, with a
 * 3 s heartbeat timeout so a killed node is taken for lost soon. Returns it loaded too, for this process's clients.
 */
export function workerConfig(temporal: TestTemporal, servers: Record<string, unknown>) {
  const dir = tmpDir();
  const node = { heartbeatTimeoutSeconds: 3, stateDir: path.join(dir, 'state') };
  const config = testConfig(temporal.server.address, { servers, node });
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(file, JSON.stringify({ temporal: config.temporal, servers, node }));
  return { config, file };
}

/** `oz0 worker` as a process of its own (see worker/processes.ts), its log into this test file's log. */
export function startWorker(file: string, name: string, workers: ChildProcess[] = [], env?: Record<string, string>) {
  return startWorkerProcess(file, name, workers, { logFile: logFileOf(expect.getState().testPath ?? 'unknown'), env });
}

/**
 * T4 cases: a job of one call to the remote server `server` at `url`, started while the only node is `oz0 worker`
 * "node-a", a process a test may kill; `file` starts the node that takes over.
 */
export async function startOnNodeA(
  temporal: TestTemporal,
  remote: { server: string; url: string },
  step: { call: string; args: Record<string, unknown> },
  workers: ChildProcess[],
) {
  const { config, file } = workerConfig(temporal, { [remote.server]: { url: remote.url } });
  const tenant = uniqueId('t');
  const a = await startWorker(file, 'node-a', workers);
  await approve(temporal, config, tenant, remote.server);
  const handle = await temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('lost'),
    args: [{ tenant, steps: [step] }],
  });
  return { config, file, a, handle };
}
