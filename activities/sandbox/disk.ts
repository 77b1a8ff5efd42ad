/**
 * A sandbox's disk (I4, `sandbox.diskMiB`): what its own folder holds, what it wrote in its write grants and what its
 * private /tmp holds. No kernel limit holds a folder's size without quotas on the node's file system, so the node
 * measures it, paced by what a walk costs, and stops the sandbox past its limit; RLIMIT_FSIZE bounds each file at the
 * limit between two walks, and /tmp is a tmpfs of that size where bubblewrap can size one (0.10 and later).
 *
 * Each file, folder or link counts at least one 4 KiB block, so a sandbox cannot take the file system's inodes with
 * empty files for free, and a walk never reads more than `limit / 4 KiB` of a sandbox's entries. In a write grant only
 * what its own uid owns counts (a grant is shared by every sandbox of its server); where every sandbox has the node's
 * uid (a node not run as root) the grant's files cannot be told apart, and ./holds.ts says so. A walk stays on the
 * file system it starts on, and never follows a link.
 */
import fs from 'node:fs';
import path from 'node:path';

/** What one entry counts at least: a block of the usual size, the price of its inode. */
export const MIN_ENTRY_BYTES = 4096;

/** What a sandbox's disk is beside its /tmp. */
export interface DiskScope {
  /** Its own folder: everything in it counts. */
  folder: string;
  /** Its write grants: what `uid` owns there counts. */
  grants: string[];
  /** Its uid when it has one of its own (a root node); without one, grants are not counted. */
  uid?: number;
}

/** Bytes an entry takes on disk, at least {@link MIN_ENTRY_BYTES}. */
function bytesOf(stat: fs.Stats): number {
  return Math.max(stat.blocks * 512, MIN_ENTRY_BYTES);
}

/**
 * The bytes a tree's entries take (each at least {@link MIN_ENTRY_BYTES}): every entry, or those `uid` owns. Stops
 * counting once past `stopAt`. A folder the node may not read (a sandbox that shares the node's uid took its modes
 * away) is given back its owner's read and search bits; one still unreadable counts as past the limit. One removed
 * between its listing and its reading (the sandbox at work in its own folder) is passed over.
 */
export async function treeBytes(
  root: string,
  opts: { uid?: number; stopAt: number; read?: { entries: number } },
): Promise<number> {
  let top: fs.Stats;
  try {
    top = await fs.promises.lstat(root);
  } catch {
    return 0;
  }
  let total = 0;
  const read = opts.read ?? { entries: 0 };
  const count = (stat: fs.Stats) => {
    read.entries++;
    if (opts.uid === undefined || stat.uid === opts.uid) total += bytesOf(stat);
  };
  count(top);
  if (!top.isDirectory()) return total;
  const stack = [root];
  while (stack.length && total <= opts.stopAt) {
    const dir = stack.pop()!;
    let entries: fs.Dirent[];
    try {
      entries = await readdirAnyway(dir);
    } catch (err) {
      // Removed (or swapped for a file) since it was listed: the sandbox's own doing, and nothing left to count.
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'ENOTDIR') continue;
      return Number.POSITIVE_INFINITY;
    }
    for (const entry of entries) {
      const p = path.join(dir, entry.name);
      let stat: fs.Stats;
      try {
        stat = await fs.promises.lstat(p);
      } catch {
        continue;
      }
      count(stat);
      if (stat.isDirectory() && stat.dev === top.dev) stack.push(p);
      if (total > opts.stopAt) break;
    }
  }
  return total;
}

async function readdirAnyway(dir: string): Promise<fs.Dirent[]> {
  try {
    return await fs.promises.readdir(dir, { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EACCES') throw err;
    const { mode } = await fs.promises.lstat(dir);
    await fs.promises.chmod(dir, mode | 0o500);
    return fs.promises.readdir(dir, { withFileTypes: true });
  }
}

/**
 * What a sandbox's folder and write grants hold now (its /tmp is read on its own), counted until past `stopAt`, and
 * how many entries the walk read (what it cost).
 */
export async function diskBytes(scope: DiskScope, stopAt: number): Promise<{ bytes: number; entries: number }> {
  const read = { entries: 0 };
  let total = await treeBytes(scope.folder, { stopAt, read });
  if (scope.uid !== undefined) {
    for (const grant of scope.grants) {
      if (total > stopAt) break;
      total += await treeBytes(grant, { uid: scope.uid, stopAt: stopAt - total, read });
    }
  }
  return { bytes: total, entries: read.entries };
}

/**
 * Hands what `uid` owns in a write grant to the grant folder's owner, keeping each file's group and mode, made
 * group-writable where its maker could write it (the sandboxes' shared group: the next sandbox of the server still
 * writes it), so a uid leased again
 * later owns nothing an earlier sandbox left there. The kernel clears a set-user-ID bit on the way. Links are changed
 * themselves, never what they point at.
 */
export async function handOver(grant: string, uid: number): Promise<void> {
  let top: fs.Stats;
  try {
    top = await fs.promises.lstat(grant);
  } catch {
    return;
  }
  const owner = top.isDirectory() ? top : await fs.promises.lstat(path.dirname(grant)).catch(() => top);
  const give = async (p: string, stat: fs.Stats) => {
    if (stat.uid !== uid) return;
    await fs.promises.lchown(p, owner.uid, -1).catch(() => undefined);
    if (stat.mode & 0o200 && !(stat.mode & 0o020) && (stat.isFile() || stat.isDirectory()))
      await groupWritable(p, stat);
  };
  await give(grant, top);
  if (!top.isDirectory()) return;
  const stack = [grant];
  while (stack.length) {
    const dir = stack.pop()!;
    const entries = await fs.promises.readdir(dir, { withFileTypes: true }).catch(() => []);
    for (const entry of entries) {
      const p = path.join(dir, entry.name);
      const stat = await fs.promises.lstat(p).catch(() => undefined);
      if (!stat) continue;
      await give(p, stat);
      if (stat.isDirectory() && stat.dev === top.dev) stack.push(p);
    }
  }
}

/**
 * What its maker could write stays writable by the next sandbox of the shared group: a program may make its files
 * 0644 whatever the umask (SQLite does), and the server's next sandbox, under another uid, could then only read its
 * own store. Through a descriptor opened without following a link and checked to be the same file, so that another
 * sandbox writing in the grant cannot swap in a link to a file of the node's between the check and the change.
 */
async function groupWritable(p: string, stat: fs.Stats): Promise<void> {
  let handle: fs.promises.FileHandle | undefined;
  try {
    handle = await fs.promises.open(p, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
    const now = await handle.stat();
    if (now.dev === stat.dev && now.ino === stat.ino) await handle.chmod((now.mode & 0o7777) | 0o020);
  } catch {
    // gone, or not a file this node may open: left as it is
  } finally {
    await handle?.close();
  }
}
