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
