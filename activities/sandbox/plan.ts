/**
 * The bubblewrap command line of one sandbox (I1-I3, I5), from what it is granted: pure, so every rule of what a
 * sandbox sees is unit-tested on its own. The file system is asked through {@link PathProbe}, never read here.
 *
 * What a sandbox sees: the system's read-only folders, its program, its grants, a fresh /proc (its own processes
 * only), a minimal /dev, a private /tmp and its own folder. The node's config, state folder and key stores are
 * hidden even inside a granted folder. Traps this avoids, each found by trying it:
 * - bwrap's `--uid` as root maps the sandbox's uid to root outside (owner of every root file): as root the node
 *   makes no user namespace and drops to an unprivileged uid with setpriv inside the namespaces instead;
 * - folders bwrap makes on its way to a mount point are mode 0700 (unreadable once the uid is dropped): each one is
 *   made first with `--dir` (0755);
 * - `--die-with-parent` kills the sandbox when its bwrap dies, so a SIGTERM must spare bwrap (./stop.ts), or the
 *   server's own cleanup never runs;
 * - bwrap follows a symlink at a mount point: a bind of a venv's `bin/python` inside its bound project folder lands on
 *   the link's target (`Can't create file at …/bin/python`). So every path is resolved as the kernel would, link by
 *   link; each link on its way is shown as the same link (already there inside a bound folder, made with `--symlink`
 *   elsewhere), its end is bound at its real place, and a bind that a bound folder already shows the same way is left
 *   out;
 * - a path resolved here and bound by its name later could be swapped for a link in between (by a sandbox that may
 *   write where it is): the caller resolves and checks grants once (./grants.ts) and hands the resolutions in, and
 *   each node folder or file is bound through a descriptor it opened (`pin`: `--bind-fd`, `--ro-bind-fd`).
 */
import path from 'node:path';

/** What a path is on the node, as a sandbox's plan needs to know. */
export type PathKind = { kind: 'dir' } | { kind: 'file' } | { kind: 'symlink'; target: string } | { kind: 'missing' };
export type PathProbe = (p: string) => PathKind;

/** A listener inside the sandbox's network (127.0.0.1:port) and the node's Unix socket it leads to. */
export interface Listener {
  port: number;
  /** The socket's name in the sandbox's run folder. */
  socket: string;
}

export interface SandboxPlan {
  /** The program, absolute, and its arguments. */
  command: string;
  args: string[];
  /** Its own folder (read-write, its working directory). */
  cwd: string;
  /** Read-only: the program's files and `sandbox.read`, absolute. */
  read: string[];
  /** Read-write: `sandbox.write`, absolute. */
  write: string[];
  /** Resolutions of `read`, `write` and `cwd` the caller made (and checked), by path: taken as they are. */
  resolved?: ReadonlyMap<string, ResolvedPath>;
  /** Never visible, even inside a granted folder: the node's config, state folder, key stores. */
  hidden: string[];
  /** I3: `none` — its own network with only loopback; `host` — the node's. */
  network: 'none' | 'host';
  /** Set when the node runs as root: the sandbox drops to this unprivileged user (setpriv), no user namespace. */
  dropTo?: { uid: number; gid: number; setpriv: string };
  /** The node's folder of Unix sockets for this sandbox, bound at {@link RUN_DIR}. */
  runDir?: string;
  /** bwrap sets PWD; the program gets only its config's environment (I5), so `env -u PWD` (this path) runs it. */
  env?: string;
  /**
   * A forwarder inside (its command: oz0's native binary, or node and its script): it listens on loopback ports and
   * leads each to a socket, then runs the program.
   */
  forwarder?: { command: string[]; listeners: Listener[] };
  /** I1: the file descriptor bwrap reads the seccomp filter from (`--seccomp`), applied just before the program. */
  seccompFd?: number;
  /** I1: the file descriptor of an /etc/passwd that names the sandbox's own uid (programs look their user up). */
  passwdFd?: number;
  /** S4: the file descriptor of an /etc/gitconfig that names its grants as safe directories (./git.ts). */
  gitconfigFd?: number;
  /** I4: the size of its /tmp and of its /dev/shm, each a tmpfs of its own (bwrap 0.10 and later size them). */
  tmpBytes?: number;
  shmBytes?: number;
  /**
   * S1: the installs of the packages it runs (inside the node's state folder, which is hidden): read-only, bound after
   * what is hidden, so they show wherever they are.
   */
  packages?: string[];
  /** I4: a command that sets the sandbox's own resource limits, then runs the rest (`prlimit … --`), once dropped. */
  inside?: string[];
}

/** Where a sandbox finds its sockets. */
export const RUN_DIR = '/run/oz0';

/** The system's read-only folders (I2): binaries, libraries, /etc. A merged-/usr system has symlinks for some. */
export const SYSTEM_PATHS = ['/usr', '/bin', '/sbin', '/lib', '/lib32', '/lib64', '/libx32', '/etc'];

/** A path as the node's kernel resolves it: the symlinks met on the way, each at its place, and where it ends. */
export interface ResolvedPath {
  real: string;
  links: Array<{ at: string; target: string }>;
}

/** Links followed on the way to one path before it is taken as written (the kernel's ELOOP bound). */
const MAX_LINKS = 40;

/** Resolves an absolute path component by component through the probe: links at any level, links to links. */
export function resolvePath(p: string, probe: PathProbe): ResolvedPath {
  const links: ResolvedPath['links'] = [];
  let budget = MAX_LINKS;
  const walk = (from: string): string => {
    const parts = path.resolve(from).split('/').filter(Boolean);
    let at = '/';
    for (const [i, part] of parts.entries()) {
      const next = path.join(at, part);
      const kind = probe(next);
      if (kind.kind !== 'symlink') at = next;
      else if (--budget < 0) return path.join(next, ...parts.slice(i + 1));
      else {
        links.push({ at: next, target: kind.target });
        at = walk(path.resolve(at, kind.target));
      }
    }
    return at;
  };
  return { real: walk(p), links };
}

/** Whether `inner` is `outer` or inside it. */
export function within(inner: string, outer: string): boolean {
  const rel = path.relative(outer, inner);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * The `bwrap` arguments, then `--`, then the program (dropped to its user, behind its forwarder). `pin` gives the
 * descriptor (its number in bwrap) a node folder or file of a grant or the sandbox's own folder is bound through;
 * without it, they are bound by name.
 */
export function bwrapArgs(plan: SandboxPlan, probe: PathProbe, pin?: (real: string) => number): string[] {
  const args: string[] = [];
  const resolve = (p: string) => plan.resolved?.get(p) ?? resolvePath(p, probe);
  /** Mount points so far: a folder of the node read-only (`ro`) or read-write (`rw`), or an empty one (`tmpfs`). */
  const mounts = new Map<string, 'ro' | 'rw' | 'tmpfs'>([['/', 'tmpfs']]);
  const made = new Set<string>(['/']);
  const holder = (p: string) =>
    [...mounts.keys()].filter((m) => within(p, m)).sort((a, b) => b.length - a.length)[0] ?? '/';
  // Folders on the way to a mount point that a bound folder does not already hold are made first, 0755.
  const parentsOf = (target: string) => {
    const chain: string[] = [];
    for (let dir = path.dirname(target); !made.has(dir) && dir !== '/'; dir = path.dirname(dir)) chain.unshift(dir);
    for (const dir of chain) {
      made.add(dir);
      if (mounts.get(holder(dir)) === 'tmpfs') args.push('--dir', dir);
    }
  };
  const mount = (flag: string, source: string, target = source) => {
    parentsOf(target);
    // --proc, --dev and --tmpfs name only where they mount.
    if (['--proc', '--dev', '--tmpfs'].includes(flag)) args.push(flag, target);
    else args.push(flag, source, target);
    mounts.set(target, flag === '--tmpfs' ? 'tmpfs' : flag.startsWith('--ro-bind') ? 'ro' : 'rw');
    made.add(target);
  };
  /** A node folder or file at its real place, through its descriptor when there is one. */
  const bindReal = (mode: 'ro' | 'rw', real: string) => {
    const fd = pin?.(real);
    if (fd === undefined) mount(mode === 'ro' ? '--ro-bind' : '--bind', real);
    else mount(mode === 'ro' ? '--ro-bind-fd' : '--bind-fd', String(fd), real);
  };
  /** Whether the node's own file at `p` shows in the sandbox (a bound folder holds it). */
  const shown = (p: string) => mounts.get(holder(p)) !== 'tmpfs';
  /** The links on a path's way, each shown as the same link: a bound folder shows its own; elsewhere one is made. */
  const showLinks = (links: ResolvedPath['links']) => {
    for (const { at, target } of links) {
      if (made.has(at) || shown(at)) continue;
      parentsOf(at);
      args.push('--symlink', target, at);
      made.add(at);
    }
  };

  args.push('--die-with-parent', '--unshare-pid', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try');
  if (plan.network === 'none') args.push('--unshare-net');
  // Root makes the namespaces itself and drops to its user inside (see above); anyone else needs a user namespace.
  if (!plan.dropTo) args.push('--unshare-user', '--disable-userns', '--cap-drop', 'ALL');
  args.push('--hostname', 'oz0-sandbox');
  for (const p of SYSTEM_PATHS) {
    const kind = probe(p);
    if (kind.kind === 'symlink') {
      args.push('--symlink', kind.target, p);
      made.add(p);
    } else if (kind.kind === 'dir') mount('--ro-bind', p);
  }
  if (plan.passwdFd !== undefined) args.push('--perms', '0644', '--ro-bind-data', String(plan.passwdFd), '/etc/passwd');
  if (plan.gitconfigFd !== undefined)
    args.push('--perms', '0644', '--ro-bind-data', String(plan.gitconfigFd), '/etc/gitconfig');
  mount('--proc', '/proc');
  mount('--dev', '/dev');
  if (plan.shmBytes !== undefined) {
    args.push('--perms', '1777', '--size', String(plan.shmBytes));
    mount('--tmpfs', '/dev/shm');
  }
  args.push('--perms', '1777');
  if (plan.tmpBytes !== undefined) args.push('--size', String(plan.tmpBytes));
  mount('--tmpfs', '/tmp');
  // Grants and the program, by where they really are, a folder before what is inside it; a path granted both ways is
  // written to. A bind a bound folder already shows the same way is left out; one that differs (the program inside a
  // write grant, a write grant inside a read one) is made over it.
  const grants = new Map<string, { mode: 'ro' | 'rw'; links: ResolvedPath['links'] }>();
  for (const [paths, mode] of [
    [plan.read, 'ro'],
    [plan.write, 'rw'],
  ] as const) {
    for (const p of paths) {
      const { real, links } = resolve(p);
      grants.set(real, { mode, links: [...(grants.get(real)?.links ?? []), ...links] });
    }
  }
  for (const real of [...grants.keys()].sort()) {
    const { mode } = grants.get(real)!;
    if (mode === 'ro' && SYSTEM_PATHS.some((s) => within(real, s))) continue;
    if (mounts.get(holder(real)) === mode) continue;
    bindReal(mode, real);
  }
  // Once every grant is bound, so a link is made only where no bound folder shows the node's own.
  showLinks([...grants.values()].flatMap((g) => g.links));
  // Hidden paths inside anything bound are covered where they really are: a folder by an empty tmpfs, a file by
  // /dev/null.
  const masked: string[] = [];
  for (const hidden of sorted(plan.hidden.map((h) => resolvePath(h, probe).real))) {
    if (!shown(hidden)) continue;
    const kind = probe(hidden);
    if (kind.kind === 'dir') {
      mount('--tmpfs', hidden);
      masked.push(hidden);
    } else if (kind.kind !== 'missing') args.push('--ro-bind', '/dev/null', hidden);
  }
  for (const p of plan.packages ?? []) mount('--ro-bind', resolvePath(p, probe).real);
  const own = resolve(plan.cwd);
  showLinks(own.links);
  bindReal('rw', own.real);
  if (plan.runDir) mount('--ro-bind', plan.runDir, RUN_DIR);
  for (const m of masked) args.push('--remount-ro', m);
  if (plan.seccompFd !== undefined) args.push('--seccomp', String(plan.seccompFd));
  args.push('--chdir', plan.cwd, '--');
  if (plan.dropTo) {
    const { uid, gid, setpriv } = plan.dropTo;
    args.push(
      setpriv,
      `--reuid=${uid}`,
      `--regid=${gid}`,
      '--clear-groups',
      '--inh-caps=-all',
      '--bounding-set=-all',
      '--no-new-privs',
      '--',
    );
  }
  if (plan.inside?.length) args.push(...plan.inside);
  if (plan.forwarder) {
    const { command, listeners } = plan.forwarder;
    args.push(...command, ...listeners.map((l) => `${l.port}=${RUN_DIR}/${l.socket}`), '--');
  }
  if (plan.env) args.push(plan.env, '-u', 'PWD');
  args.push(plan.command, ...plan.args);
  return args;
}

/** Absolute paths without repeats, a folder before what is inside it (bwrap mounts in order). */
function sorted(paths: string[]): string[] {
  return [...new Set(paths.map((p) => path.resolve(p)))].sort();
}
