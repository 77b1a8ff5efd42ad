/**
 * What of the node's files a sandbox needs to run its program (I2): its command, and the files and folders its
 * arguments name, read-only. A command installed in a prefix of its own (`<prefix>/bin/python`, a virtualenv, a
 * Node.js from nvm) also gets that prefix's `lib` folder and `pyvenv.cfg`: an interpreter is its binary and its
 * standard library. The system's folders are bound anyway.
 */
import fs from 'node:fs';
import path from 'node:path';
import { SYSTEM_PATHS, within } from './plan';

function exists(p: string): boolean {
  try {
    fs.statSync(p);
    return true;
  } catch {
    return false;
  }
}

/** The interpreter's own files beside a command at `<prefix>/bin/<name>`, outside the system's folders. */
function prefixFiles(command: string): string[] {
  const bin = path.dirname(command);
  if (path.basename(bin) !== 'bin') return [];
  const prefix = path.dirname(bin);
  if (prefix === '/' || SYSTEM_PATHS.some((s) => within(prefix, s))) return [];
  return [path.join(prefix, 'lib'), path.join(prefix, 'lib64'), path.join(prefix, 'pyvenv.cfg')].filter(exists);
}

/**
 * The paths a program needs read-only: its command (absolute, as found on the node's PATH), the file it links to,
 * their prefixes' libraries, and each argument that is an absolute path on the node (relative ones were made
 * absolute beside the config before this) — but one inside its write grants (`writable`), which is the grant's to
 * write (S4: `--log out.jsonl`, a file it makes on its first run and writes again on the next).
 */
export function programPaths(command: string, args: string[], writable: readonly string[] = []): string[] {
  const out = new Set<string>();
  const real = exists(command) ? fs.realpathSync(command) : command;
  for (const c of new Set([command, real])) {
    if (!exists(c)) continue;
    out.add(c);
    for (const p of prefixFiles(c)) out.add(p);
  }
  for (const arg of args) {
    if (!path.isAbsolute(arg) || !exists(arg)) continue;
    const p = path.normalize(arg);
    if (!writable.some((w) => within(p, w))) out.add(p);
  }
  return [...out];
}
