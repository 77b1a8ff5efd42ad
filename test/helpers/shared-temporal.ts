/**
 * One Temporal dev server per Jest worker, shared by the test files that worker runs (each in a namespace of its
 * own: see useTemporal in ./temporal.ts). global-setup starts them before any test, global-teardown stops them; the
 * workers find theirs in OZ0_TEST_SERVERS by JEST_WORKER_ID. A server per file cost each file a start and a stop
 * (about 2 s of a loaded machine) and a cold server's first workflows.
 */
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { startDevServer } from '../../worker/dev-server';
import type { DevServer } from '../../worker/dev-server';

const SharedServerSchema = z.object({ address: z.string().min(1), httpAddress: z.string().optional() });
const SharedServersSchema = z.array(SharedServerSchema).min(1);

/** Where a shared server listens. */
export type SharedServer = z.infer<typeof SharedServerSchema>;

/** The variable the workers read: a JSON array of the servers, one per worker. */
const SERVERS_ENV = 'OZ0_TEST_SERVERS';

/** What global-teardown stops: jest hands globalSetup's globals to globalTeardown, and nothing else. */
declare global {
  var oz0SharedServers: DevServer[] | undefined;
}

/**
 * Starts `count` dev servers at once (their output in `logDir`) and names them in this process's environment, which
 * the workers inherit.
 */
export async function startSharedServers(count: number, opts: { cli?: string; logDir: string }): Promise<void> {
  fs.mkdirSync(opts.logDir, { recursive: true });
  const logFile = (n: number) => path.join(opts.logDir, `temporal-server-${n}.log`);
  const started = await Promise.allSettled(
    Array.from({ length: count }, (_, i) =>
      startDevServer({ cli: opts.cli, uiPort: false, logFile: logFile(i + 1), ownGroup: false }),
    ),
  );
  const servers = started.flatMap((s) => (s.status === 'fulfilled' ? [s.value] : []));
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
  globalThis.oz0SharedServers = servers;
  if (failed) {
    await stopSharedServers();
    throw failed.reason;
  }
  const named: SharedServer[] = servers.map((s) => ({ address: s.address, httpAddress: s.httpAddress }));
  process.env[SERVERS_ENV] = JSON.stringify(named);
  // A run cut short skips global-teardown: the servers are in jest's process group, which a Ctrl-C or a kill of the
  // group reaches, and jest's own exit takes them too.
  process.once('exit', () => {
    for (const s of servers) if (s.pid > 0) killQuietly(s.pid);
  });
}

/** Stops the servers startSharedServers started in this process. */
export async function stopSharedServers(): Promise<void> {
  const servers = globalThis.oz0SharedServers ?? [];
  globalThis.oz0SharedServers = undefined;
  await Promise.all(servers.map((s) => s.stop()));
}

function killQuietly(pid: number): void {
  try {
    process.kill(pid, 'SIGKILL');
  } catch {
    // gone already
  }
}

/**
 * This Jest worker's server (JEST_WORKER_ID counts from 1; a run in band is worker 1), or undefined where no run
 * started any (a jest config without global-setup): then a file starts a server of its own.
 */
export function sharedServer(env: NodeJS.ProcessEnv = process.env): SharedServer | undefined {
  const text = env[SERVERS_ENV];
  if (!text) return undefined;
  const servers = SharedServersSchema.parse(JSON.parse(text));
  const worker = Number(env.JEST_WORKER_ID ?? '1');
  return servers[(Math.max(worker, 1) - 1) % servers.length];
}
