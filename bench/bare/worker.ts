/**
 * The baseline worker: a plain Temporal worker whose activities call the reader over one MCP stdio client, with
 * no keys, policy, heartbeats or trace. It runs in the bench's process, or as a process of its own for the memory
 * measure (`node dist/bench/bare/worker.js '<options as JSON>'`, ready once it says so on stderr).
 */
import fs from 'node:fs';
import { Client as McpClient } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';
import { NativeConnection, Worker, bundleWorkflowCode } from '@temporalio/worker';
import type { WorkflowBundleOption } from '@temporalio/worker';
import { ExternalStorage } from '@temporalio/common';
import { S3StorageDriver } from '@temporalio/external-storage-s3';
import { FolderObjects } from '../../data';
import { bareActivities } from './activities';

export interface BareWorkerOptions {
  address: string;
  taskQueue: string;
  /** The reader's stdio entry point, and its environment. */
  reader: string;
  readerEnv: Record<string, string>;
  slots: number;
  /** A prebuilt bundle of bench/bare/workflows (so no webpack runs in a measured process); else bundled here. */
  bundlePath?: string;
  /** D7: a folder for Temporal's External Storage (its S3 driver over files), so big results fit. */
  store?: string;
  /** The name it gives the server, which the histories it writes record (issue 56: which build ran a task). */
  identity?: string;
  /** Issue 56: Worker Versioning, this worker as one build of a deployment, its jobs PINNED to the build they start on. */
  deployment?: { name: string; buildId: string };
  /** `false`: no eager activity dispatch (the SDK asks for it by default, for activities on its own queue). */
  eagerActivities?: boolean;
}

export interface BareWorker {
  taskQueue: string;
  mcp: McpClient;
  close(): Promise<void>;
}

/** Temporal's External Storage as a plain worker has it: its S3 driver, here over a folder (data/'s client). */
function folderStorage(folder: string): ExternalStorage {
  const driver = new S3StorageDriver({ client: new FolderObjects(folder), bucket: 'objects' });
  return new ExternalStorage({ drivers: [driver] });
}

const silent = { trace() {}, debug() {}, info() {}, warn() {}, error() {}, log() {} };

/** The bare workflows' bundle, as code. */
export async function bareBundleCode(): Promise<string> {
  return (await bundleWorkflowCode({ workflowsPath: require.resolve('./workflows'), logger: silent })).code;
}

export async function runBareWorker(opts: BareWorkerOptions): Promise<BareWorker> {
  const mcp = new McpClient({ name: 'bench-bare', version: '1' });
  await mcp.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [opts.reader],
      env: { ...opts.readerEnv, PATH: process.env.PATH ?? '' },
      // The SDK takes a message of 10 MiB at most by default: the baseline takes what oz0 takes (node.maxResultMiB).
      maxBufferSize: 80 * 1024 * 1024,
    }),
  );
  const native = await NativeConnection.connect({ address: opts.address });
  const workflowBundle: WorkflowBundleOption = opts.bundlePath
    ? { codePath: opts.bundlePath }
    : { code: await bareBundleCode() };
  const worker = await Worker.create({
    connection: native,
    taskQueue: opts.taskQueue,
    workflowBundle,
    ...(opts.store ? { dataConverter: { externalStorage: folderStorage(opts.store) } } : {}),
    activities: bareActivities(mcp),
    maxConcurrentActivityTaskExecutions: opts.slots,
    stickyQueueScheduleToStartTimeout: '3s',
    ...(opts.identity ? { identity: opts.identity } : {}),
    ...(opts.deployment
      ? {
          workerDeploymentOptions: {
            version: { deploymentName: opts.deployment.name, buildId: opts.deployment.buildId },
            useWorkerVersioning: true,
            defaultVersioningBehavior: 'PINNED',
          },
        }
      : {}),
    ...(opts.eagerActivities === false ? { maxEagerActivityReservationsPerWorkflowTask: 0 } : {}),
  });
  const running = worker.run();
  return {
    taskQueue: opts.taskQueue,
    mcp,
    async close() {
      worker.shutdown();
      await running;
      await mcp.close();
      await native.close();
    },
  };
}

if (require.main === module) {
  const opts = JSON.parse(process.argv[2] ?? '{}') as BareWorkerOptions;
  if (opts.bundlePath && !fs.existsSync(opts.bundlePath)) throw new Error(`no bundle at ${opts.bundlePath}`);
  runBareWorker(opts)
    .then((w) => {
      process.stderr.write('bare worker ready\n');
      process.once('SIGTERM', () => void w.close().then(() => process.exit(0)));
    })
    .catch((err: unknown) => {
      process.stderr.write(`${String((err as Error).stack ?? err)}\n`);
      process.exit(1);
    });
}
