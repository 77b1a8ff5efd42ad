/**
 * The embedded default: the Temporal CLI's dev server (`temporal server start-dev`) with a SQLite file, the
 * Web UI, on 127.0.0.1. Tests start their own on free ports.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import { CODEC_PATH, startUiFront } from './ui-front';
import type { UiFront } from './ui-front';

/**
 * Dynamic config every dev server oz0 starts gets; the same values are in deploy/temporal/dynamicconfig.yaml, for
 * clusters (a test checks).
 * - The history shard reads its transfer, timer and visibility queues at most 20 times a second by default, which
 *   made every call wait up to 50 ms for the next read — the floor under every figure (issue 18). Its outbound
 *   queue too, which carries the worker commands below (issue 36).
 * - Worker commands (issue 26): the server pushes an activity's cancel to the worker that runs it, on its process's
 *   control queue, instead of leaving it for the answer to the activity's next heartbeat. Off by default in 1.32.
 * - Fair dispatch by tenant (SPEC F1): the matcher orders each queue's tasks by their fairness key (oz0 puts the tenant
 *   there) and weight, not only by arrival; off by default in 1.32. A queue of one partition dispatches in that order
 *   exactly: with the default four, each partition keeps its own order and a poll takes from any (docs/tenants.md).
 */
export const DEV_SERVER_DYNAMIC_CONFIG: Record<string, number | boolean> = {
  'history.transferProcessorMaxPollRPS': 1000,
  'history.timerProcessorMaxPollRPS': 1000,
  'history.visibilityProcessorMaxPollRPS': 1000,
  'history.outboundProcessorMaxPollRPS': 1000,
  'system.enableCancelActivityWorkerCommand': true,
  'frontend.WorkerCommandsEnabled': true,
  'matching.enableFairness': true,
  'matching.numTaskqueueReadPartitions': 1,
  'matching.numTaskqueueWritePartitions': 1,
};

export interface DevServerOptions {
  /** The Temporal CLI; without one, @temporalio/testing downloads it (that needs the internet). */
  cli?: string;
  /** SQLite file; without one, the server keeps its state in memory only. */
  dbFile?: string;
  ip?: string;
  port?: number;
  /** The Web UI's port; `false` runs headless. */
  uiPort?: number | false;
  /**
   * D5: the approvals inbox's address: the UI decodes payloads through its codec server, with the person's sign-in
   * there (./ui-front.ts puts the UI behind a front on its port for that).
   */
  uiCodec?: string;
  namespace?: string;
  /** Where the server's own output goes (a file path); default: discarded. */
  logFile?: string;
  /** Dynamic config values; default {@link DEV_SERVER_DYNAMIC_CONFIG} (`{}`: the server's own defaults). */
  dynamicConfig?: Record<string, unknown>;
  startTimeoutMs?: number;
  /**
   * A process group of its own (default), so a Ctrl-C at the terminal reaches only oz0, which stops the server after
   * its nodes; `false` leaves it in its parent's group, which a signal to the group (a test run cut short) ends too.
   */
  ownGroup?: boolean;
}

export interface DevServer {
  address: string;
  /** Temporal's HTTP API (`host:port`), where the server has one. */
  httpAddress?: string;
  namespace: string;
  uiUrl?: string;
  pid: number;
  /** Stops the server (SIGTERM, then SIGKILL) and waits for it to exit. */
  stop(): Promise<void>;
  /** Resolves when the server process exits on its own or is stopped. */
  exited: Promise<number | null>;
}

/** A TCP port nobody listens on right now. */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.unref();
    srv.on('error', reject);
    srv.listen(0, host, () => {
      const port = (srv.address() as net.AddressInfo).port;
      srv.close(() => resolve(port));
    });
  });
}

/** The server exited while it started: most often a port it was given, or one it picked itself, was taken. */
class ExitedAtStart extends Error {}

/**
 * Starts a dev server on free ports. Ports are picked free, then given to the server, which picks more of its own
 * (its internal services'): another process, or the server itself, may take one in between, and the server exits.
 * That start is tried again with fresh ports (the gRPC port too, unless the caller fixed it), three times at most.
 */
export async function startDevServer(opts: DevServerOptions): Promise<DevServer> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await startOnce(opts);
    } catch (err) {
      if (!(err instanceof ExitedAtStart) || attempt >= 3) throw err;
    }
  }
}

async function startOnce(opts: DevServerOptions): Promise<DevServer> {
  const ip = opts.ip ?? '127.0.0.1';
  const port = opts.port ?? (await freePort(ip));
  const namespace = opts.namespace ?? 'default';
  if (!opts.cli) return startDownloadedDevServer(opts, ip, port, namespace);
  const args = ['server', 'start-dev', '--ip', ip, '--port', String(port), '--log-level', 'warn'];
  const httpPort = await freePort(ip);
  args.push('--http-port', String(httpPort), '--metrics-port', String(await freePort(ip)));
  if (namespace !== 'default') args.push('--namespace', namespace);
  for (const [key, value] of Object.entries(opts.dynamicConfig ?? DEV_SERVER_DYNAMIC_CONFIG)) {
    args.push('--dynamic-config-value', `${key}=${JSON.stringify(value)}`);
  }
  if (opts.dbFile) {
    fs.mkdirSync(path.dirname(opts.dbFile), { recursive: true });
    args.push('--db-filename', opts.dbFile);
  }
  let uiPort: number | undefined;
  /** The real UI's port, behind the front when the UI decodes through the inbox. */
  let backPort: number | undefined;
  if (opts.uiPort === false) args.push('--headless');
  else {
    uiPort = opts.uiPort ?? (await freePort(ip));
    backPort = opts.uiCodec ? await freePort(ip) : uiPort;
    args.push('--ui-port', String(backPort));
    if (opts.uiCodec) args.push('--ui-codec-endpoint', `http://${ip}:${uiPort}${CODEC_PATH}`);
  }
  const out = opts.logFile ? fs.openSync(opts.logFile, 'a') : 'ignore';
  const child: ChildProcess = spawn(opts.cli, args, { stdio: ['ignore', out, out], detached: opts.ownGroup ?? true });
  if (typeof out === 'number') fs.closeSync(out);
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  const address = `${ip}:${port}`;
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(timer);
  };
  const deadline = Date.now() + (opts.startTimeoutMs ?? 60_000);
  for (;;) {
    if (child.exitCode !== null) {
      throw new ExitedAtStart(`temporal server start-dev exited with ${child.exitCode} (${args.join(' ')})`);
    }
    try {
      const connection = await Connection.connect({ address, connectTimeout: 1000 });
      try {
        await connection.workflowService.describeNamespace({ namespace });
        break;
      } finally {
        await connection.close();
      }
    } catch (err) {
      if (Date.now() > deadline) {
        await stop();
        throw new Error(`the Temporal dev server did not come up at ${address}: ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
  let front: UiFront | undefined;
  if (opts.uiCodec && uiPort !== undefined) {
    try {
      front = await startUiFront({ ip, port: uiPort, ui: `http://${ip}:${backPort}`, inbox: opts.uiCodec });
    } catch (err) {
      await stop();
      // The public port was taken in between: started again with fresh ports, as the server's own.
      if ((err as NodeJS.ErrnoException).code === 'EADDRINUSE' && opts.uiPort === undefined) {
        throw new ExitedAtStart(`the UI's port ${uiPort} was taken`);
      }
      throw err;
    }
  }
  return {
    address,
    httpAddress: `${ip}:${httpPort}`,
    namespace,
    uiUrl: uiPort ? `http://${ip}:${uiPort}` : undefined,
    pid: child.pid ?? -1,
    stop: async () => {
      await front?.close();
      await stop();
    },
    exited,
  };
}

/** The last resort: @temporalio/testing fetches the CLI itself and runs the same dev server. */
async function startDownloadedDevServer(
  opts: DevServerOptions,
  ip: string,
  port: number,
  namespace: string,
): Promise<DevServer> {
  const { TestWorkflowEnvironment } = await import('@temporalio/testing');
  const uiPort = opts.uiPort === false ? undefined : (opts.uiPort ?? (await freePort(ip)));
  const env = await TestWorkflowEnvironment.createLocal({
    server: {
      ip,
      port,
      namespace,
      dbFilename: opts.dbFile,
      ui: uiPort !== undefined,
      uiPort,
      extraArgs: [
        '--log-level',
        'warn',
        ...Object.entries(opts.dynamicConfig ?? DEV_SERVER_DYNAMIC_CONFIG).flatMap(([key, value]) => [
          '--dynamic-config-value',
          `${key}=${JSON.stringify(value)}`,
        ]),
      ],
    },
  });
  let resolveExit: (code: number | null) => void = () => undefined;
  const exited = new Promise<number | null>((resolve) => (resolveExit = resolve));
  return {
    address: `${ip}:${port}`,
    namespace,
    uiUrl: uiPort ? `http://${ip}:${uiPort}` : undefined,
    pid: -1,
    exited,
    async stop() {
      await env.teardown();
      resolveExit(0);
    },
  };
}
