/**
 * Grants by what they are (I2). A grant names a path; what a sandbox is shown is what that path leads to when it
 * starts, and a symlink on the way may have been put there by another sandbox: one with a write grant that replaced a
 * folder, which a second server is granted to read, with a link to the node's config folder (issue 34.3). So each
 * grant is resolved, every component, when its sandbox starts; held against what no sandbox may see and against links
 * a sandbox could have made ({@link wayProblem}, pure); and bound by what was checked: the node opens the resolved path
 * (`O_PATH`), makes sure the descriptor is still what it checked, and bubblewrap binds that descriptor
 * (`--bind-fd`, `--ro-bind-fd`: 0.10+, and backports such as Debian 12's; {@link byNameProblem} where it has none), comparing after the mount what it mounted with what it was given. A folder
 * swapped for a link after the check is not followed: the mount is of the folder the node opened, or none.
 */
import fs from 'node:fs';
import type { ResolvedPath } from './plan';
import { within } from './plan';

/** What no sandbox may see, where it really is: the node's config file, its state folder, a key store's files. */
export interface Place {
  path: string;
  /** In words: `the node's config file`, `the node's state folder (node.stateDir)`. */
  what: string;
}

/** `is the node's config file`, or `is in the node's state folder (node.stateDir)` for a path inside it. */
export function isIn(p: string, place: Place): string {
  return p === place.path ? `is ${place.what}` : `is in ${place.what}`;
}

/** A folder some sandbox of this config may write (its `sandbox.write`), where it really is: links there are a tenant's. */
export interface WritableGrant {
  field: string;
  path: string;
}

/**
 * Why a grant may not be bound as it resolves, or undefined. `label` names it (`servers.x.sandbox.read[0]: /srv/a`,
 * `its program /srv/a/x.js`). In order:
 * - it ends inside what no sandbox may see (however it got there);
 * - it passes a link inside a folder some sandbox may write, and ends outside that folder: the link's target is a
 *   tenant's choice (a link there to elsewhere in the same folder shows nothing the tenant could not copy in);
 * - it passes a link and ends at a folder that holds what no sandbox may see: a direct grant of such a folder is the
 *   config author's (what is hidden in it is covered), one through a link is not;
 * - it may be written and holds what no sandbox may see: a sandbox that writes there could move the folder that holds
 *   it aside (the node covers it at its path only) or plant a file the node is about to write (a key store's `-wal`).
 */
export function wayProblem(
  label: string,
  mode: 'ro' | 'rw',
  { real, links }: ResolvedPath,
  places: readonly Place[],
  writable: readonly WritableGrant[],
): string | undefined {
  const way = links.length
    ? `${label} leads through the link ${links[0].at} → ${links[0].target} to ${real}, which`
    : `${label}`;
  const inside = places.find((p) => within(real, p.path));
  if (inside) return `${way} ${isIn(real, inside)}, which no sandbox may see`;
  for (const link of links) {
    const holder = writable.find((w) => within(link.at, w.path) && !within(real, w.path));
    if (holder) {
      return `${label} leads through the link ${link.at} → ${link.target}, inside ${holder.field} (${holder.path}), which a sandbox may change, to ${real} outside it`;
    }
  }
  const held = places.find((p) => within(p.path, real));
  if (held && links.length) return `${way} holds ${held.what}, which no sandbox may see`;
  if (held && mode === 'rw') {
    return `${label} holds ${held.what}: a sandbox that may write there could move it aside or plant a file where the node writes one, so no sandbox may write there`;
  }
  return undefined;
}

/**
 * Where bwrap cannot bind a descriptor (no `--ro-bind-fd`: upstream before 0.10), a grant is bound by its name, and a
 * folder on its way that a sandbox may write could be swapped for a link between the node's check and the mount: such
 * a grant is refused (a write grant itself, whose way a sandbox cannot change, is not).
 */
export function byNameProblem(label: string, real: string, writable: readonly WritableGrant[]): string | undefined {
  const holder = writable.find((w) => within(real, w.path) && real !== w.path);
  if (!holder) return undefined;
  return `${label} lies inside ${holder.field} (${holder.path}), which a sandbox may change, and this node's bubblewrap binds by name (no --ro-bind-fd): a folder there swapped for a link between the node's check and the mount would be followed; bubblewrap 0.10 or later (oz0's copy, or Debian 12's security update) binds what the node checked`;
}

/** `O_PATH` (Linux): a descriptor that names a file or folder without opening it for reading; not in fs.constants. */
const O_PATH = 0o10000000;
/** The first descriptor number the sandbox's bwrap gets them at (0-2 are its stdio). */
const FIRST_FD = 3;

export class ChangedWhileStarting extends Error {
  override name = 'ChangedWhileStarting';
}

/**
 * The node's descriptors of what a sandbox binds, each opened once it was checked and handed to its bwrap at
 * {@link FIRST_FD} on; closed in the node once bwrap has them.
 */
export class PinnedPaths {
  /** The node's descriptors, in the order bwrap gets them. */
  readonly fds: number[] = [];
  private readonly byPath = new Map<string, number>();

  /** `first`: the number bwrap sees the first descriptor at (after what else the node hands it on 3, 4, …). */
  constructor(private readonly first = FIRST_FD) {}

  /**
   * Opens `real` (resolved and checked) without following a link at its end, and makes sure it is still that path
   * and a folder or file: a link put on its way since it was checked shows as another path, one at its end as a link.
   * Returns the descriptor's number in bwrap.
   */
  pin(real: string): number {
    const known = this.byPath.get(real);
    if (known !== undefined) return known;
    let fd: number;
    try {
      fd = fs.openSync(real, O_PATH | fs.constants.O_NOFOLLOW);
    } catch (err) {
      throw new ChangedWhileStarting(
        `${real} changed while its sandbox started (${(err as NodeJS.ErrnoException).code})`,
      );
    }
    const now = fs.readlinkSync(`/proc/self/fd/${fd}`);
    const stat = fs.fstatSync(fd);
    if (now !== real || !(stat.isDirectory() || stat.isFile())) {
      fs.closeSync(fd);
      const became = now !== real ? `leads to ${now}` : 'is a link';
      throw new ChangedWhileStarting(`${real} changed while its sandbox started: it now ${became}`);
    }
    this.fds.push(fd);
    const number = this.first + this.fds.length - 1;
    this.byPath.set(real, number);
    return number;
  }

  close(): void {
    for (const fd of this.fds.splice(0)) fs.closeSync(fd);
    this.byPath.clear();
  }
}
