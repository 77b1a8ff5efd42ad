/**
 * How oz0 reaches Temporal: the config's address and namespace (TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE win),
 * plus whatever Temporal's own environment configuration adds — an API key or mTLS for Temporal Cloud, from
 * TEMPORAL_API_KEY, TEMPORAL_TLS_*, or a profile of temporal.toml (TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE).
 */
import net from 'node:net';
import { loadClientConfigProfile, toClientOptions } from '@temporalio/envconfig';
import type { NativeConnectionOptions } from '@temporalio/worker';
import type { Config } from './config';

export function connectionOptions(
  temporal: Config['temporal'],
  env: NodeJS.ProcessEnv = process.env,
): NativeConnectionOptions {
  const profile = loadClientConfigProfile({
    profile: env.TEMPORAL_PROFILE,
    overrideEnvVars: Object.fromEntries(Object.entries(env).filter((e): e is [string, string] => e[1] !== undefined)),
  });
  return toClientOptions({ ...profile, address: temporal.address, namespace: temporal.namespace }).connectionOptions;
}

/** What a person does about a Temporal server that is not there. */
const START_ONE =
  'start the embedded default with `oz0 dev` (a Temporal dev server at temporal.address, and one node), or point ' +
  'temporal.address (or TEMPORAL_ADDRESS) at a running server';

/** grpc-js takes these to send its connection through a proxy: then a direct connection predicts nothing. */
const GRPC_PROXY_ENV = ['grpc_proxy', 'https_proxy', 'http_proxy'];

/**
 * Why nothing can answer at `address`, when a plain TCP connection says so at once: refused (no server listens
 * there), no such host, no route. gRPC's own wait keeps trying a refused address until its deadline (10 s) and then
 * says only "Failed to connect before the deadline". Undefined when the connection opens, when it takes longer than
 * `timeoutMs` (gRPC's wait decides then), when the address is not `host:port`, and when gRPC would use a proxy.
 */
export function refusal(
  address: string,
  env: NodeJS.ProcessEnv = process.env,
  timeoutMs = 2000,
): Promise<string | undefined> {
  const parsed = /^\[?([^\]/]+?)\]?:(\d{1,5})$/.exec(address);
  if (!parsed || GRPC_PROXY_ENV.some((name) => env[name])) return Promise.resolve(undefined);
  const [, host, port] = parsed;
  return new Promise((resolve) => {
    const socket = net.connect({ host, port: Number(port), timeout: timeoutMs });
    const done = (why: string | undefined) => {
      socket.destroy();
      resolve(why);
    };
    socket.once('connect', () => done(undefined));
    socket.once('timeout', () => done(undefined));
    socket.once('error', (err: NodeJS.ErrnoException) => {
      const code = err.code ?? '';
      if (code === 'ECONNREFUSED') done(`connection refused: no server listens on port ${port}`);
      else if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') done(`no such host "${host}"`);
      else if (code === 'EHOSTUNREACH' || code === 'ENETUNREACH') done(`no route to ${host}`);
      else done(undefined);
    });
  });
}

/** The error of every failed connection to Temporal: the address, why, and how to start a server. */
export function temporalUnreachable(address: string, why: string): Error {
  return new Error(`cannot reach Temporal at ${address}: ${why}; ${START_ONE}`);
}

/**
 * Throws `temporalUnreachable` when a plain TCP connection to Temporal says at once that nothing answers there: the
 * CLI's commands and a node check before they connect (and a node before it installs Temporal's runtime, which would
 * keep the process alive after the error).
 */
export async function assertReachable(temporal: Config['temporal']): Promise<void> {
  const why = await refusal(temporal.address);
  if (why) throw temporalUnreachable(temporal.address, why);
}
