/** Replaces `env:NAME` values with the node's environment; a missing one is an error naming the field. */
export function resolveEnvRefs(
  values: Record<string, string>,
  env: NodeJS.ProcessEnv,
  field: string,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(values)) {
    if (value.startsWith('env:')) {
      const from = value.slice(4);
      const resolved = env[from];
      if (resolved === undefined) throw new Error(`${field}.${name} names ${from}, which is not set on this node`);
      out[name] = resolved;
    } else out[name] = value;
  }
  return out;
}

/** The values a config's `env` took from the node's environment (`env:NAME`): secrets, never in a log or a note. */
export function envSecrets(values: Record<string, string>, resolved: Record<string, string>): string[] {
  return Object.entries(values)
    .filter(([, value]) => value.startsWith('env:'))
    .map(([name]) => resolved[name]);
}
