/**
 * Shared test plumbing. An integration file opens with `const temporal = useTemporal();`: before its tests it has this
 * Jest worker's dev server (one per worker, shared by the files it runs: ./shared-temporal.ts), a connection, a
 * client and a namespace of the file's own (so no file sees another's jobs, tenants' policies or queues); its
 * configs (`temporal.config`, `temporal.configFile`) point there; worker processes it starts with
 * `temporal.startWorker` are killed after the file, and the connection closed. Every field is there from beforeAll.
 *
 * OZ0_TEST_TEMPORAL=host:port runs the tests against that Temporal instead (a cluster from `npm run cluster`):
 * every test file connects to it, in its default namespace, and a test that restarts the server has the cluster
 * restart its own.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import type { Payload } from '@temporalio/common';
import type { ClientOptions, WorkflowExecutionInfo, WorkflowHandle } from '@temporalio/client';
import { Oz0Tenant } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { openedWith, processDataOf } from '../../data';
import { wholeAnswers } from '../../client/runs';
import { createNode } from '../../worker/node';
import { connectJobClient, jobTrace, startJob } from '../../client/jobs';
import { approveListing, readListing } from '../../client/approve';
import { policyTargetOf } from '../../common/policy-client';
import type { Oz0Node } from '../../worker/node';
import { parseConfig } from '../../common/config';
import type { LoadedConfig } from '../../common/config';
import { freePort, startDevServer } from '../../worker/dev-server';
import { restartClusterTemporal } from '../../deploy/local-cluster/control';
import { ensureSearchAttributes } from '../../worker/search-attributes';
import type { ChildProcess } from 'node:child_process';
import pino from 'pino';
import { killTree, startWorker as startWorkerProcess } from '../../worker/processes';
import { createLogger } from '../../common/logger';
import { logFileOf } from '../logs';
import { findTemporalCli } from '../../worker/temporal-cli';
import type { JobSpec } from '../../model/schemas';
import { sharedServer } from './shared-temporal';

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

let fileKeys: string | undefined;
/**
 * D4: the key folder of every config a test file makes (unless it names its own sealing) and of its client: the file's
 * nodes seal what they write with keys made there, and its client opens it, as one machine's processes share theirs.
 */
export function testKeys(): string {
  return (fileKeys ??= tmpDir('oz0-keys-'));
}

/**
 * A test's `payloads` section, sealed with the file's keys unless it names its own: sealing `"off"` there still opens
 * with the file's keys what the file's other nodes sealed (its tenants' policies, the namespace's kill switches).
 */
function sealedPayloads(payloads: unknown): Record<string, unknown> {
  const given = (payloads ?? {}) as Record<string, unknown>;
  const seal =
    given.seal === 'off' ? { folder: testKeys(), newPayloads: 'plain' } : (given.seal ?? { folder: testKeys() });
  return { ...given, seal };
}

/** A client of this file's data converter: the file's keys (./testKeys), no payload store (as a bare client has). */
export function testClient(
  connection: Connection,
  namespace: string,
  options: Omit<ClientOptions, 'connection' | 'namespace' | 'dataConverter'> = {},
): Client {
  const data = processDataOf({
    ...parseConfig({ payloads: { store: 'off', seal: { folder: testKeys() } } }),
    baseDir: ROOT,
  });
  const client = new Client({ ...options, connection, namespace, dataConverter: data.dataConverter });
  data.useClient(client);
  return client;
}

/** Where a file's Temporal is: its gRPC address, its HTTP API where it has one, and the file's namespace. */
export interface TemporalAt {
  address: string;
  httpAddress?: string;
  namespace: string;
}

/** A test file's Temporal (useTemporal). */
export interface TestTemporal {
  server: TemporalAt;
  connection: Connection;
  client: Client;
  /** A config for this file's namespace: see testConfig. */
  config(input: Record<string, unknown>): LoadedConfig;
  /**
   * The same config written to `oz0.config.json` in a folder of its own, for `oz0 worker` processes: the file holds
   * `input` as given (stateDir in that folder unless `input.node` names one) and this Temporal.
   */
  configFile(input: Record<string, unknown>): { config: LoadedConfig; file: string; dir: string };
  /** `oz0 worker` on a config file, as a process of its own (killed with its tree after the file, if still there). */
  startWorker(file: string, name: string, env?: Record<string, string>): ReturnType<typeof startWorkerProcess>;
  /** Several at once (each takes seconds to start), each with its name. */
  startWorkers(file: string, ...names: string[]): Promise<Array<{ name: string } & StartedWorker>>;
}

type StartedWorker = Awaited<ReturnType<typeof startWorkerProcess>>;

/** The Temporal the tests run against instead of dev servers of their own, if any. */
export const externalTemporal = process.env.OZ0_TEST_TEMPORAL;

interface Opened {
  server: TemporalAt;
  connection: Connection;
  client: Client;
  close(): Promise<void>;
}

/**
 * The test file's Temporal, ready from beforeAll on: call it once, at the top of the file. After the file it kills
 * the worker processes started through it and closes the connection; the shared server outlives the file.
 */
export function useTemporal(): TestTemporal {
  let opened: Opened | undefined;
  const workers: ChildProcess[] = [];
  beforeAll(async () => {
    opened = await openTemporal(path.basename(expect.getState().testPath ?? 'test', '.test.ts'));
  }, 90_000);
  afterAll(async () => {
    for (const w of workers) if (w.exitCode === null && w.signalCode === null && w.pid) killTree(w.pid);
    await opened?.close();
  });
  const now = (): Opened => {
    if (!opened) throw new Error('useTemporal(): the Temporal is there from beforeAll on, not at the top of the file');
    return opened;
  };
  const temporal: TestTemporal = {
    get server() {
      return now().server;
    },
    get connection() {
      return now().connection;
    },
    get client() {
      return now().client;
    },
    config: (input) => testConfig(now().server, input),
    configFile(input) {
      const dir = tmpDir();
      const node = { stateDir: path.join(dir, 'state'), ...(input.node as object | undefined) };
      const config = testConfig(now().server, { ...input, node });
      const file = path.join(dir, 'oz0.config.json');
      fs.writeFileSync(
        file,
        JSON.stringify({ ...input, temporal: config.temporal, node, payloads: sealedPayloads(input.payloads) }),
      );
      return { config, file, dir };
    },
    startWorker: (file, name, env) => startWorker(file, name, workers, env),
    startWorkers: (file, ...names) =>
      Promise.all(names.map(async (name) => ({ name, ...(await startWorker(file, name, workers)) }))),
  };
  return temporal;
}

/**
 * Connects to this Jest worker's shared server and makes a namespace for the file there (oz0's search attributes
 * in it); without a shared one (a jest config without global-setup), a dev server of the file's own; or the
 * external one.
 */
async function openTemporal(file: string): Promise<Opened> {
  const shared = externalTemporal ? { address: externalTemporal } : sharedServer();
  const own = shared ? undefined : await startDevServer({ cli: findTemporalCli({ install: false }), uiPort: false });
  const address = shared?.address ?? own!.address;
  const connection = await Connection.connect({ address });
  const namespace = shared && !externalTemporal ? await fileNamespace(connection, file) : 'default';
  const server = { address, httpAddress: shared?.httpAddress ?? own?.httpAddress, namespace };
  return {
    server,
    connection,
    client: testClient(connection, namespace),
    async close() {
      await connection.close();
      await own?.stop();
    },
  };
}

/** A fresh namespace named after the file, with oz0's search attributes; ready for workers once it is found. */
async function fileNamespace(connection: Connection, file: string): Promise<string> {
  const namespace = `${file.replace(/[^a-z0-9-]/gi, '-').slice(0, 40)}-${randomBytes(3).toString('hex')}`;
  await connection.workflowService.registerNamespace({
    namespace,
    workflowExecutionRetentionPeriod: msToTs('1 day'),
  });
  await ensureSearchAttributes(connection, namespace);
  return namespace;
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

/**
 * A config for tests: the given servers and tools, at `at` (an address: its default namespace), a unique task queue,
 * state in a tmp folder.
 */
export function testConfig(at: string | TemporalAt, input: Record<string, unknown>): LoadedConfig {
  const { address, namespace } = typeof at === 'string' ? { address: at, namespace: 'default' } : at;
  const dir = tmpDir();
  const taskQueue = uniqueId('oz0-test');
  const config = parseConfig({
    ...input,
    payloads: sealedPayloads(input.payloads),
    temporal: { address, namespace, taskQueue },
    node: { heartbeatTimeoutSeconds: 10, ...(input.node as object | undefined), stateDir: path.join(dir, 'state') },
  });
  return { ...config, baseDir: ROOT, source: 'test' };
}

/**
 * The file an `oz0 worker` process reads for a test's config (as `config`, made from `input`): the same Temporal and
 * task queue as the test's in-process nodes, and a state folder of its own in `dir`.
 */
export function configFile(dir: string, config: LoadedConfig, input: Record<string, unknown>): string {
  const file = path.join(dir, 'oz0.config.json');
  const node = { ...(input.node as object | undefined), stateDir: path.join(dir, 'state') };
  fs.writeFileSync(file, JSON.stringify({ ...input, temporal: config.temporal, node }));
  return file;
}

/** Path of a test fixture server. */
export function fixture(name: string): string {
  return path.join(ROOT, 'test', 'fixtures', name);
}

/**
 * D1, D3: a job's result with every answer its steps keep in the payload store read back whole, as
 * `oz0 job trace --json` shows it (the store is the config's).
 */
export async function wholeResult(handle: WorkflowHandle, config: LoadedConfig): Promise<JobTrace> {
  const trace: JobTrace = await handle.result();
  const tenant = (await handle.describe()).typedSearchAttributes.get(Oz0Tenant) ?? '';
  const steps = await wholeAnswers(processDataOf(config), trace.steps, { jobId: handle.workflowId, tenant });
  return { ...trace, steps };
}

/** Starts a job on a fresh node for this config, waits for its trace (answers whole), and shuts the node down. */
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
    const trace = await wholeResult(handle, config);
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

/**
 * Waits until one of the job's running activities has heartbeaten details that mention `text` (a task id): then
 * Temporal holds it, and a node lost now leaves it to the next attempt.
 */
export function heartbeatMentions(handle: WorkflowHandle, text: string, timeoutMs = 30_000): Promise<true> {
  return eventually(
    async () => {
      const pending = (await handle.describe()).raw.pendingActivities ?? [];
      // Opened as the handle's client reads payloads: heartbeats are sealed with the job's tenant's key (D4).
      const details = await openedWith(
        handle.client.options.loadedDataConverter,
        pending.flatMap((a) => a.heartbeatDetails?.payloads ?? []),
        { type: 'workflow', namespace: handle.client.options.namespace, workflowId: handle.workflowId },
      );
      return details.some((p) =>
        Buffer.from(p.data ?? [])
          .toString('utf8')
          .includes(text),
      )
        ? true
        : undefined;
    },
    timeoutMs,
    `a heartbeat that carries ${text}`,
  );
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

/** `oz0 worker` as a process of its own (see worker/processes.ts), its log into this test file's log. */
function startWorker(file: string, name: string, workers: ChildProcess[], env?: Record<string, string>) {
  sealedWithFileKeys(file);
  return startWorkerProcess(file, name, workers, { logFile: logFileOf(expect.getState().testPath ?? 'unknown'), env });
}

/**
 * A config file a test wrote itself, given the file's keys unless it names its own sealing: its `oz0 worker` opens
 * what the test's client and in-process nodes seal, as one machine's processes sharing a key folder do (D4).
 */
export function sealedWithFileKeys(file: string): void {
  let input: { payloads?: Record<string, unknown> };
  try {
    input = JSON.parse(fs.readFileSync(file, 'utf8')) as typeof input;
  } catch {
    return; // not there, or not JSON: what the test means to show
  }
  if (!input || typeof input !== 'object' || Array.isArray(input) || input.payloads?.seal !== undefined) return;
  fs.writeFileSync(file, JSON.stringify({ ...input, payloads: sealedPayloads(input.payloads) }, null, 2));
}

/**
 * T4 cases: a job of one call to the remote server `server` at `url`, started while the only node is `oz0 worker`
 * "node-a", a process a test may kill; `file` starts the node that takes over. Its nodes have a 3 s heartbeat
 * timeout, so a killed one is taken for lost soon.
 */
export async function startOnNodeA(
  temporal: TestTemporal,
  remote: { server: string; url: string },
  step: { call: string; args: Record<string, unknown> },
) {
  const servers = { [remote.server]: { url: remote.url } };
  const { config, file } = temporal.configFile({ servers, node: { heartbeatTimeoutSeconds: 3 } });
  const tenant = uniqueId('t');
  const a = await temporal.startWorker(file, 'node-a');
  await approve(temporal, config, tenant, remote.server);
  const handle = await temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('lost'),
    args: [{ tenant, steps: [step] }],
  });
  return { config, file, a, handle };
}

/**
 * Runs a job to its end on a fresh node of `config`, read back by a client of the same config: its result as the
 * workflow returned it (`raw`), and its trace with every answer the store keeps read whole (`shown`).
 */
export async function runWhole(config: LoadedConfig, spec: object, id = uniqueId('whole')) {
  const jc = await connectJobClient(config);
  const node = await createNode({ config, logger });
  try {
    return await node.runUntil(async () => {
      const handle = await startJob(jc, spec, { workflowId: id });
      const raw: JobTrace = await handle.result();
      const shown = await jobTrace(jc.client, id, { data: jc.data, whole: true });
      return { id, raw, shown, runId: (await handle.describe()).runId };
    });
  } finally {
    await jc.close();
  }
}

/** A pending activity's last heartbeat as the handle's client reads it: opened (D4), then Temporal's JSON. */
export async function heartbeatOf<T>(
  handle: WorkflowHandle,
  payload: Payload | null | undefined,
): Promise<T | undefined> {
  if (!payload) return undefined;
  const converter = handle.client.options.loadedDataConverter;
  const context = {
    type: 'workflow' as const,
    namespace: handle.client.options.namespace,
    workflowId: handle.workflowId,
  };
  const [opened] = await openedWith(converter, [payload], context);
  return converter.payloadConverter.fromPayload(opened) as T;
}

/**
 * Every payload of a job's history (its current run) as text, opened as the handle's client reads them (D4): what a
 * person who may read the job sees of it. Search attributes and the SDK's local-activity markers are Temporal's own.
 */
export async function openedHistoryText(handle: WorkflowHandle): Promise<string> {
  const found: Payload[] = [];
  const walk = (v: unknown, key = ''): void => {
    if (!v || typeof v !== 'object' || key === 'searchAttributes') return;
    if (Array.isArray(v)) return v.forEach((x) => walk(x));
    const o = v as { metadata?: Record<string, Uint8Array>; markerName?: string };
    if (o.metadata?.encoding instanceof Uint8Array) return void found.push(o as Payload);
    for (const [k, x] of Object.entries(o)) walk(x, o.markerName && k === 'details' ? 'marker' : k);
  };
  walk((await handle.fetchHistory()).events);
  const converter = handle.client.options.loadedDataConverter;
  const context = {
    type: 'workflow' as const,
    namespace: handle.client.options.namespace,
    workflowId: handle.workflowId,
  };
  const opened = await openedWith(converter, found, context);
  return opened.map((p) => Buffer.from(p.data ?? new Uint8Array()).toString('utf8')).join('\n');
}
