/**
 * A sandbox's disk (I4, `sandbox.diskMiB`): what its own folder holds, what it wrote in its write grants and what its
 * private /tmp holds. No kernel limit holds a folder's size without quotas on the node's file system, so the node
 * measures it, paced by what a walk costs, and stops the sandbox past its limit; RLIMIT_FSIZE bounds each file at the
 * limit between two walks, and /tmp is a tmpfs of that size where bubblewrap can size one (0.10 and later).
 *
 * Each file, folder or link counts at least one 4 KiB block, so a sandbox cannot take the file system's inodes with
 * empty files for free, and a walk never reads more than `limit / 4 KiB` of a sandbox's entries. In a write grant what
 * its own uid owns counts, and so does what the grant's handed-over files (I12: no live sandbox's) grew by since it
 * started, so files an earlier sandbox left count against whoever writes them next; where every sandbox has the
 * node's uid (a node not run as root) the grant's files cannot be told apart, and ./holds.ts says so.
 *
 * I12: every walk here, the measure's and the hand-over's, goes by descriptors: each entry is named from the folder
 * open at its parent's descriptor (openat(2)'s resolution, through /proc/self/fd), never by a path from the top, so a
 * sandbox that renames a folder of the walk into a link meanwhile leads it nowhere, at any component. A walk stays on
 * the file system it starts on, and goes at most {@link MAX_DEPTH} folders down.
 */
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

/** What one entry counts at least: a block of the usual size, the price of its inode. */
export const MIN_ENTRY_BYTES = 4096;
/** How deep a walk goes: one descriptor a level is open at once. A deeper tree counts as past any disk limit. */
export const MAX_DEPTH = 256;
/** Linux's O_PATH (Node's fs.constants lacks it): a descriptor that names a file without reading it. */
const O_PATH = 0o10000000;
const { O_RDONLY, O_DIRECTORY, O_NOFOLLOW, O_NONBLOCK } = fs.constants;

const open = promisify(fs.open);
const close = promisify(fs.close);
const fstat = promisify(fs.fstat);

/**
 * `name` in the folder open at `fd`, resolved from that folder whatever was renamed or linked above it (openat's
 * resolution); its last component is followed only by a call that follows links (use lstat, lchown). Without a name,
 * the folder itself.
 */
export function at(fd: number, name?: string): string {
  return name === undefined ? `/proc/self/fd/${fd}` : `/proc/self/fd/${fd}/${name}`;
}

/** What a sandbox's disk is beside its /tmp. */
export interface DiskScope {
  /** Its own folder: everything in it counts. */
  folder: string;
  /** Its write grants: what `uid` owns there counts, and what their handed-over files grew by. */
  grants: string[];
  /** Its uid when it has one of its own (a root node); without one, grants are not counted. */
  uid?: number;
  /** Every sandbox's uids (`node.sandboxUids`): a file another live sandbox owns counts against that one. */
  sandboxUids?: { first: number; count: number };
  /** What the grants' handed-over files took when it started ({@link handedBytes}). */
  handedAtStart?: number;
}

/** Bytes an entry takes on disk, at least {@link MIN_ENTRY_BYTES}. */
function bytesOf(stat: fs.Stats): number {
  return Math.max(stat.blocks * 512, MIN_ENTRY_BYTES);
}

/** What a walk's visitor says of an entry: go on, or stop the walk. */
export type Visit = (where: string, stat: fs.Stats) => boolean | Promise<boolean>;

/**
 * Walks a tree by descriptors (see the top of this file), visiting each entry with its lstat and a path of it that is
 * safe to act on (`where`, {@link at}); stops where `visit` says false. `unreadable` when a folder could not be read
 * even after its owner's read and search bits were given back (a sandbox that shares the node's uid may take them
 * away), or when the tree is deeper than {@link MAX_DEPTH}. An entry removed or swapped for a link or a file between
 * its listing and its reading is passed over: the sandbox's own doing, and nothing is followed.
 */
export async function walkTree(root: string, visit: Visit): Promise<'unreadable' | undefined> {
  const top = await fs.promises.lstat(root).catch(() => undefined);
  if (!top || !(await visit(root, top)) || !top.isDirectory()) return undefined;
  const fd = await openFolder(root);
  if (fd === 'unreadable' || fd === undefined) return fd;
  try {
    const end = await walkFolder(fd, top.dev, 1, visit);
    return end === 'stop' ? undefined : end;
  } finally {
    await close(fd);
  }
}

async function walkFolder(
  fd: number,
  dev: number,
  depth: number,
  visit: Visit,
): Promise<'stop' | 'unreadable' | undefined> {
  let names: string[];
  try {
    names = await fs.promises.readdir(at(fd));
  } catch {
    return 'unreadable';
  }
  for (const name of names) {
    const where = at(fd, name);
    const stat = await fs.promises.lstat(where).catch(() => undefined);
    if (!stat) continue;
    if (!(await visit(where, stat))) return 'stop';
    if (!stat.isDirectory() || stat.dev !== dev) continue;
    if (depth >= MAX_DEPTH) return 'unreadable';
    const sub = await openFolder(where);
    if (sub === 'unreadable') return sub;
    if (sub === undefined) continue;
    try {
      const { dev: subDev } = await fstat(sub);
      const end = subDev === dev ? await walkFolder(sub, dev, depth + 1, visit) : undefined;
      if (end) return end;
    } finally {
      await close(sub);
    }
  }
  return undefined;
}

/**
 * A folder opened to be listed, never through a link (O_NOFOLLOW, O_DIRECTORY): undefined when it is gone or is no
 * longer a folder. One the node may not read is given back its owner's read and search bits first, through a
 * descriptor that names it (O_PATH), so that a link swapped in meanwhile is never what is changed.
 */
async function openFolder(where: string): Promise<number | 'unreadable' | undefined> {
  const flags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK;
  try {
    return await open(where, flags);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code !== 'EACCES') return undefined;
  }
  try {
    const named = await open(where, O_PATH | O_DIRECTORY | O_NOFOLLOW);
    try {
      const { mode } = await fstat(named);
      await fs.promises.chmod(at(named), mode | 0o500);
      return await open(at(named), flags);
    } finally {
      await close(named);
    }
  } catch {
    return 'unreadable';
  }
}

/**
 * The bytes a tree's entries take (each at least {@link MIN_ENTRY_BYTES}): every entry, or those `uid` owns. Stops
 * counting once past `stopAt`. A tree it could not read whole (see {@link walkTree}) counts as past the limit.
 */
export async function treeBytes(
  root: string,
  opts: { uid?: number; stopAt: number; read?: { entries: number } },
): Promise<number> {
  let total = 0;
  const read = opts.read ?? { entries: 0 };
  const end = await walkTree(root, (_where, stat) => {
    read.entries++;
    if (opts.uid === undefined || stat.uid === opts.uid) total += bytesOf(stat);
    return total <= opts.stopAt;
  });
  return end === 'unreadable' ? Number.POSITIVE_INFINITY : total;
}

/** Whether `uid` is one a sandbox may be leased. */
function sandboxUid(uid: number, range: DiskScope['sandboxUids']): boolean {
  return range !== undefined && uid >= range.first && uid < range.first + range.count;
}

/**
 * I12: what the grants' handed-over files take: every entry no sandbox's uid owns (what earlier sandboxes left, handed
 * to the grant's owner, and the owner's own). Read when a sandbox starts; what it grows by while the sandbox runs
 * counts against that sandbox.
 */
export async function handedBytes(grants: string[], range: DiskScope['sandboxUids']): Promise<number> {
  let total = 0;
  for (const grant of grants) {
    const end = await walkTree(grant, (_where, stat) => {
      if (!sandboxUid(stat.uid, range)) total += bytesOf(stat);
      return true;
    });
    if (end === 'unreadable') return Number.POSITIVE_INFINITY;
  }
  return total;
}

/**
 * What a sandbox's folder and write grants hold now (its /tmp is read on its own), counted until past `stopAt`, and
 * how many entries the walk read (what it cost). In its grants: what its uid owns, and what the handed-over files grew
 * by since it started (so another sandbox writing the same handed-over files at the same time counts against both).
 */
export async function diskBytes(scope: DiskScope, stopAt: number): Promise<{ bytes: number; entries: number }> {
  const read = { entries: 0 };
  const folder = await treeBytes(scope.folder, { stopAt, read });
  const { uid } = scope;
  if (uid === undefined || folder > stopAt) return { bytes: folder, entries: read.entries };
  let own = 0;
  let handed = 0;
  const baseline = scope.handedAtStart ?? Number.POSITIVE_INFINITY;
  const total = () => folder + own + Math.max(0, handed - baseline);
  for (const grant of scope.grants) {
    const end = await walkTree(grant, (_where, stat) => {
      read.entries++;
      if (stat.uid === uid) own += bytesOf(stat);
      else if (!sandboxUid(stat.uid, scope.sandboxUids)) handed += bytesOf(stat);
      return total() <= stopAt;
    });
    if (end === 'unreadable') return { bytes: Number.POSITIVE_INFINITY, entries: read.entries };
    if (total() > stopAt) break;
  }
  return { bytes: total(), entries: read.entries };
}

/**
 * Hands what `uid` owns in a write grant to the grant folder's owner, keeping each file's group and mode, made
 * group-writable where its maker could write it (the sandboxes' shared group: the next sandbox of the server still
 * writes it), so a uid leased again later owns nothing an earlier sandbox left there. The kernel clears a set-user-ID
 * bit on the way. Links are changed themselves, never what they point at, at any component of a path (I12): the walk
 * goes by descriptors, and each entry is changed from its folder's descriptor, so a folder another sandbox of the
 * server swaps for a link meanwhile leads nowhere outside.
 */
export async function handOver(grant: string, uid: number): Promise<void> {
  const top = await fs.promises.lstat(grant).catch(() => undefined);
  if (!top) return;
  const owner = top.isDirectory() ? top : await fs.promises.lstat(path.dirname(grant)).catch(() => top);
  await walkTree(grant, async (where, stat) => {
    if (stat.uid !== uid) return true;
    await fs.promises.lchown(where, owner.uid, -1).catch(() => undefined);
    if (stat.mode & 0o200 && !(stat.mode & 0o020) && (stat.isFile() || stat.isDirectory()))
      await groupWritable(where, stat);
    return true;
  });
}

/**
 * What its maker could write stays writable by the next sandbox of the shared group: a program may make its files
 * 0644 whatever the umask (SQLite does), and the server's next sandbox, under another uid, could then only read its
 * own store. Through a descriptor opened without following a link and checked to be the same file, so that another
 * sandbox writing in the grant cannot swap in a link to a file of the node's between the check and the change.
 */
async function groupWritable(where: string, stat: fs.Stats): Promise<void> {
  let fd: number | undefined;
  try {
    fd = await open(where, O_PATH | O_NOFOLLOW);
    const now = await fstat(fd);
    if (now.dev === stat.dev && now.ino === stat.ino) await fs.promises.chmod(at(fd), (now.mode & 0o7777) | 0o020);
  } catch {
    // gone, or not a file this node may open: left as it is
  } finally {
    if (fd !== undefined) await close(fd);
  }
}
