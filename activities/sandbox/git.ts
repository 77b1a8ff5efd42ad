/**
 * S4: git in a sandbox. A sandbox runs as a uid of its own (I1), so a repository its config grants belongs to another
 * user, and git refuses it ("detected dubious ownership in repository") — as `mcp-server-git`, granted its repository
 * as its README says, found. Each sandbox sees an /etc/gitconfig of its own: the node's (if any) and its grants, each
 * named in git's `safe.directory`. Only its grants, exactly, never `*`: a repository another sandbox planted somewhere
 * else in a shared write grant stays one git will not run the hooks or config of.
 */
import fs from 'node:fs';

/** A value as git's config file reads it: quoted, with `\` and `"` escaped. */
function quoted(value: string): string {
  return `"${value.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;
}

/** The /etc/gitconfig a sandbox with these grants sees; undefined when it has none (git's own rules then hold). */
export function gitConfigFor(grants: readonly string[], system = '/etc/gitconfig'): string | undefined {
  const folders = [...new Set(grants)].filter((p) => !/[\n\r\0]/.test(p));
  if (folders.length === 0) return undefined;
  let own = '';
  try {
    own = fs.readFileSync(system, 'utf8').replace(/\n?$/, '\n');
  } catch {
    // none on this machine
  }
  const safe = folders.map((p) => `\tdirectory = ${quoted(p)}\n`).join('');
  return `${own}# oz0: the grants of this sandbox, whose files belong to another user than its own (S4)\n[safe]\n${safe}`;
}
