/**
 * How oz0 reaches Temporal: the config's address and namespace (TEMPORAL_ADDRESS / TEMPORAL_NAMESPACE win),
 * plus whatever Temporal's own environment configuration adds — an API key or mTLS for Temporal Cloud, from
 * TEMPORAL_API_KEY, TEMPORAL_TLS_*, or a profile of temporal.toml (TEMPORAL_PROFILE, TEMPORAL_CONFIG_FILE).
 */
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
