/**
 * The tenant boundary (SPEC I1-I8): every process a node starts on a job's behalf that is not the platform's shared
 * code — a sandboxed server, a harness — runs in a bubblewrap sandbox of its own: namespaces, no capabilities,
 * `no_new_privs`, an unprivileged uid, only its grants in view (./plan.ts), no network but its grants (./network.ts)
 * and limits the node watches (./limits.ts); still the leader of its own process group, so every stop (C3, C7, H5,
 * H7) works as before. A node that cannot isolate refuses, saying what is missing (I6), unless its config says
 * `node.isolation: "none"`.
 */
import { spawnSync } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import type net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { LoadedConfig, SandboxConfig } from '../../common/config';
import type { Logger } from '../../common/logger';
import { projectRoot } from '../../common/paths';
import { resolveCommand, spawnGroup, startGroup, stopGroup } from '../../common/process-group';
import type { Started } from '../../common/process-group';
import { bwrapBindsFds, bwrapVersion, findBwrap } from './bwrap';
import type { BwrapFound, FoundBwrap } from './bwrap';
import { detectLimits, removeStaleGroups } from './limits';
import type { LimitsBackend, LimitsHandle } from './limits';
import { SandboxNetwork, grantOf, parseGrant } from './network';
import { bwrapArgs, resolvePath, within } from './plan';
import type { PathKind, ResolvedPath, SandboxPlan } from './plan';
import { ChangedWhileStarting, PinnedPaths, byNameProblem, isIn, wayProblem } from './grants';
import type { Place, WritableGrant } from './grants';
import { programPaths } from './program';
import { UNKNOWN } from '../observe/metrics';
import type { NodeMetrics } from '../observe/metrics';

export interface SandboxRequest {
  /** Who it is, in words: `server "notes" (sandbox of job-1)`, `harness "refunds"`. */
  who: string;
  /** Its config's field, for errors: `servers.notes.sandbox`. */
  field: string;
  /** Its command and arguments, relative paths already made absolute beside the config. */
  command: string;
  args: string[];
  /** Its own folder, made by the caller: read-write, its working directory. */
  cwd: string;
  /** All the environment it gets. */
  env: Record<string, string>;
  grants: SandboxConfig;
  /** A harness's gateway, reached at the same 127.0.0.1 port inside as outside (H3). */
  gateway?: { port: number; accept(socket: net.Socket): void; maxConnections?: number };
}

/** What a node can do about isolation, said at start and by `oz0 plugin test` (I6). */
export interface IsolationStatus {
  mode: 'bwrap' | 'none';
  /** Why this node cannot isolate, and how to get it; undefined when it can (or isolation is off). */
  problem?: string;
  /** How limits are held (`cgroup v1`, …) and what they cannot hold to. */
  limits?: { kind: string; gaps: string[] };
  /** I8: the bubblewrap it runs, where it came from, and the version it says it is. */
  bwrap?: FoundBwrap & { version: string; bindsFds: boolean };
}

/** I8: which bubblewrap, in words: `bubblewrap 0.11.0 at /usr/bin/bwrap (on PATH)`. */
export function describeBwrap(bwrap: NonNullable<IsolationStatus['bwrap']>): string {
  return `bubblewrap ${bwrap.version} at ${bwrap.path} (${bwrap.from})`;
}

export class IsolationRefused extends Error {
  override name = 'IsolationRefused';
}

/** What no sandbox may see: a folder, or a file and the files SQLite keeps beside it; and what it is, in words. */
interface SecretPlace {
  path: string;
  what: string;
  files?: string[];
}

/** Isolations made in this process (tests run several nodes in one). */
let instances = 0;

/** How often a running sandbox's limits are read. */
const WATCH_MS = 250;

export class Isolation {
  private status?: IsolationStatus;
  private limits?: LimitsBackend;
  /** This node's folder of control groups: its pid (a later node removes it once that pid is gone), and its own number. */
  private readonly tag = `node-${process.pid}-${++instances}`;
  private readonly dropTo?: { uid: number; gid: number };

  constructor(
    private readonly config: LoadedConfig,
    private readonly logger: Logger,
    /** O1: counts sandboxes started and stopped. */
    private readonly metrics?: NodeMetrics,
    /** I8: the bwrap to run, as the node found or installed it (worker/bubblewrap.ts); found here by default. */
    private bwrap?: BwrapFound,
  ) {
    if (process.getuid?.() === 0) this.dropTo = { uid: config.node.sandboxUid, gid: config.node.sandboxGid };
  }

  /** I6: whether sandboxes can start here, found once by starting an empty one. */
  check(): IsolationStatus {
    if (this.status) return this.status;
    if (this.config.node.isolation === 'none') return (this.status = { mode: 'none' });
    const bwrap = (this.bwrap ??= findBwrap({ configured: this.config.node.bwrap, baseDir: this.config.baseDir }));
    if ('missing' in bwrap) return (this.status = { mode: 'bwrap', problem: bwrap.missing });
    const problem = probeProblem(bwrap, this.dropTo);
    if (problem) return (this.status = { mode: 'bwrap', problem });
    removeStaleGroups(alive);
    this.limits = detectLimits(this.tag);
    return (this.status = {
      mode: 'bwrap',
      limits: { kind: this.limits.kind, gaps: this.limits.gaps },
      bwrap: {
        ...bwrap,
        version: bwrapVersion(bwrap.path) ?? 'of unknown version',
        bindsFds: bwrapBindsFds(bwrap.path),
      },
    });
  }

  /** Removes what this node's limits left (its folder of control groups), once its sandboxes are stopped. */
  async close(): Promise<void> {
    await this.limits?.close();
  }

  /** What a node says at start about its sandboxes: how they are isolated, or why they cannot start. */
  startupLines(): Array<{ level: 'info' | 'warn' | 'error'; text: string }> {
    const sandboxed = [
      ...Object.entries(this.config.servers).flatMap(([name, s]) =>
        'command' in s && s.sandbox ? [[`server "${name}"`, `servers.${name}.sandbox`, s.sandbox] as const] : [],
      ),
      ...Object.entries(this.config.harnesses).map(
        ([name, h]) => [`harness "${name}"`, `harnesses.${name}.sandbox`, h.sandbox] as const,
      ),
    ];
    if (sandboxed.length === 0) return [];
    const status = this.check();
    const lines: Array<{ level: 'info' | 'warn' | 'error'; text: string }> = [];
    if (status.mode === 'none') {
      lines.push({
        level: 'warn',
        text: 'node.isolation is "none": sandboxed servers and harnesses run unisolated, with the node\'s files, network and processes in reach — never run more than one tenant so',
      });
    } else if (status.problem) {
      lines.push({
        level: 'error',
        text: `sandboxed servers and harnesses cannot start on this node: ${status.problem}`,
      });
    } else {
      const limits = status.limits!;
      lines.push({ level: 'info', text: `sandboxes: ${describeBwrap(status.bwrap!)}, limits by ${limits.kind}` });
      for (const gap of limits.gaps) lines.push({ level: 'warn', text: `sandbox limits: ${gap}` });
      if (!status.bwrap!.bindsFds) {
        lines.push({
          level: 'warn',
          text: `sandbox grants: ${describeBwrap(status.bwrap!)} binds by name (no --ro-bind-fd), so a grant inside a folder a sandbox may write is refused; bubblewrap 0.10 or later binds what the node checked`,
        });
      }
    }
    for (const [who, field, grants] of sandboxed) {
      if (grants.network === 'host') {
        lines.push({ level: 'warn', text: `${who} shares this node's network (sandbox.network: "host")` });
      }
      if (status.mode === 'none') continue;
      for (const problem of [...this.grantProblems(field, grants), ...this.envProblems(field)])
        lines.push({ level: 'error', text: `${who} cannot start: ${problem}` });
    }
    return lines;
  }

  /** Starts the request's program in a sandbox of its own; throws {@link IsolationRefused} saying why it cannot. */
  async start(req: SandboxRequest): Promise<Started> {
    const started = await this.startSandbox(req);
    if (this.metrics) {
      // `servers.NAME.sandbox` or `harnesses.NAME.sandbox`: the config's names, a bounded label.
      const [group, name] = req.field.split('.');
      const stopped = this.metrics.sandboxStarted(group === 'harnesses' ? 'harness' : 'server', name ?? UNKNOWN);
      started.child.once('exit', () => stopped(started.stoppedFor() ? 'limit' : 'exit'));
    }
    return started;
  }

  private async startSandbox(req: SandboxRequest): Promise<Started> {
    const status = this.check();
    const command = resolveCommand(req.command);
    if (status.mode === 'none') return startGroup({ command, args: req.args, cwd: req.cwd, env: req.env });
    if (status.problem) throw new IsolationRefused(`${req.who} cannot start: ${status.problem}`);
    const hidden = this.hiddenPaths();
    const absolute = (p: string) => path.resolve(this.config.baseDir, p);
    const read = req.grants.read.map(absolute);
    const write = req.grants.write.map(absolute);
    const program = programPaths(command, req.args);
    // I2: resolved once, here: what is checked is what the plan binds (through descriptors opened after the check).
    const checked = this.checkGrants(req.field, req.grants, program);
    const problem = [...checked.problems, ...this.envProblems(req.field)][0];
    if (problem) throw new IsolationRefused(`${req.who} cannot start: ${problem}`);
    checked.resolved.set(req.cwd, resolvePath(req.cwd, probePath));
    if (this.dropTo) fs.chownSync(req.cwd, this.dropTo.uid, this.dropTo.gid);
    const grants = req.grants.network === 'host' ? [] : req.grants.network;
    const network =
      req.grants.network !== 'host' && (grants.length > 0 || req.gateway)
        ? await SandboxNetwork.open({
            grants,
            dnsServers: this.config.node.dnsServers,
            gateway: req.gateway,
            owner: this.dropTo,
            logger: this.logger,
            who: req.who,
          })
        : undefined;
    let limits: LimitsHandle | undefined;
    const pins = new PinnedPaths();
    try {
      limits = this.limits!.create(`sandbox-${randomBytes(6).toString('hex')}`, req.grants);
      const plan: SandboxPlan = {
        command,
        args: req.args,
        cwd: req.cwd,
        read: [...program, ...read],
        write,
        resolved: checked.resolved,
        hidden,
        network: req.grants.network === 'host' ? 'host' : 'none',
        dropTo: this.dropTo && { ...this.dropTo, setpriv: resolveCommand('setpriv') },
        runDir: network?.runDir,
        forwarder: network && { node: process.execPath, script: forwarderScript(), listeners: network.listeners },
        env: Object.hasOwn(req.env, 'PWD') ? undefined : resolveCommand('env'),
      };
      if (plan.forwarder) plan.read.push(plan.forwarder.node, plan.forwarder.script);
      // I2: bound through the descriptors of what was checked, where this bwrap can (else by name: see byNameProblem).
      const pin = status.bwrap!.bindsFds ? (real: string) => pins.pin(real) : undefined;
      const argv = [...limits.prefix, status.bwrap!.path, ...bwrapArgs(plan, probePath, pin)];
      const child = await spawnGroup({
        command: argv[0],
        args: argv.slice(1),
        cwd: req.cwd,
        env: { ...req.env, ...network?.env },
        fds: pins.fds,
      });
      return this.watch(child, limits, network, req);
    } catch (err) {
      await limits?.dispose();
      await network?.close();
      if (err instanceof ChangedWhileStarting) throw new IsolationRefused(`${req.who} cannot start: ${err.message}`);
      throw err;
    } finally {
      // bwrap holds them now (and closes each once it is mounted): the node's copies go.
      pins.close();
    }
  }

  /** Watches a running sandbox's limits: past one it is stopped at once (SIGKILL), and says which. */
  private watch(
    child: ChildProcess,
    limits: LimitsHandle,
    network: SandboxNetwork | undefined,
    req: SandboxRequest,
  ): Started {
    let breach: string | undefined;
    const kill = () => {
      try {
        process.kill(-child.pid!, 'SIGKILL');
      } catch {
        // gone already
      }
    };
    const timer = setInterval(() => {
      breach ??= limits.breach();
      if (breach) {
        this.logger.warn({ sandbox: req.who, limit: breach }, 'a sandbox went past a limit and was stopped');
        clearInterval(timer);
        kill();
      }
    }, WATCH_MS);
    timer.unref();
    let cleaned: Promise<void> | undefined;
    const cleanup = () =>
      (cleaned ??= (async () => {
        clearInterval(timer);
        await network?.close();
        await limits.dispose();
      })());
    child.once('exit', (code) => {
      // Read before the group is removed: a process the kernel stopped for memory shows only there.
      breach ??= limits.breach({ code });
      if (breach) kill();
      void cleanup();
    });
    return {
      child,
      isolated: true,
      stoppedFor: () => breach,
      refusedSince: (since) => network?.refusedSince(since) ?? [],
      stop: async (graceMs, stdinGraceMs) => {
        await stopGroup(child, graceMs, stdinGraceMs, true);
        await cleanup();
      },
    };
  }

  /**
   * I2: what no sandbox may see, each with where the config names it: the node's state folder, its config file, and
   * the key stores of its plugin servers — each file a plugin server's `env` names, with SQLite's `-wal`, `-shm` and
   * `-journal` beside it.
   */
  private secretPlaces(): SecretPlace[] {
    const { config } = this;
    const out: SecretPlace[] = [
      { path: path.resolve(config.baseDir, config.node.stateDir), what: "the node's state folder (node.stateDir)" },
    ];
    if (config.source !== 'defaults' && path.isAbsolute(config.source)) {
      out.push({ path: config.source, what: "the node's config file" });
    }
    for (const [name, server] of Object.entries(config.servers)) {
      if (!('command' in server) || server.sandbox) continue;
      for (const [key, value] of Object.entries(server.env)) {
        if (value.startsWith('env:') || !/[/\\.]/.test(value)) continue;
        const file = path.resolve(config.baseDir, value);
        out.push({
          path: file,
          what: `the key store of plugin server "${name}" (servers.${name}.env.${key})`,
          files: [file, `${file}-wal`, `${file}-shm`, `${file}-journal`],
        });
      }
    }
    return out;
  }

  /** I2: what no sandbox may see, where it really is: every file of a key store, there yet or not. */
  private places(): Place[] {
    return this.secretPlaces().flatMap((place) =>
      (place.files ?? [place.path]).map((p) => ({ path: realPath(p), what: place.what })),
    );
  }

  /** Every folder a sandbox of this config may write, where it really is: a link inside one is a tenant's. */
  private writableGrants(): WritableGrant[] {
    const blocks = [
      ...Object.entries(this.config.servers).flatMap(([name, s]) =>
        'command' in s && s.sandbox ? [[`servers.${name}.sandbox`, s.sandbox] as const] : [],
      ),
      ...Object.entries(this.config.harnesses).map(([name, h]) => [`harnesses.${name}.sandbox`, h.sandbox] as const),
    ];
    return blocks.flatMap(([field, grants]) =>
      grants.write.map((w, i) => ({
        field: `${field}.write[${i}]`,
        path: realPath(path.resolve(this.config.baseDir, w)),
      })),
    );
  }

  /** I2: the paths to hide from a sandbox now: the state folder, the config file, each key store file there is. */
  private hiddenPaths(): string[] {
    return this.secretPlaces().flatMap((place) => (place.files ? place.files.filter(isFile) : [place.path]));
  }

  /**
   * A sandbox's own `env` naming what no sandbox may see (a file a plugin keeps its keys in, the state folder): hidden
   * from it whatever its grants say, so it would fail at run time (EACCES). Each clash names both fields. Relative
   * paths in a sandbox's `env` are its own folder's, and `env:NAME` values are the node's secrets: neither is looked at.
   */
  envProblems(field: string): string[] {
    const [group, name] = field.split('.');
    const owner = group === 'harnesses' ? this.config.harnesses[name] : this.config.servers[name];
    if (!owner || !('command' in owner)) return [];
    // Compared where they really are: a link to a key store is the key store.
    const places = this.secretPlaces().map((p) => ({ ...p, path: realPath(p.path), files: p.files?.map(realPath) }));
    const problems: string[] = [];
    for (const [key, value] of Object.entries(owner.env)) {
      if (!path.isAbsolute(value)) continue;
      const file = realPath(value);
      const place = places.find((p) => (p.files ? p.files.includes(file) : within(file, p.path)));
      if (!place) continue;
      problems.push(
        `${group}.${name}.env.${key}: ${file} ${isIn(file, { ...place, path: place.files ? file : place.path })}, which no sandbox may see, whatever its grants say (I2): give it a file of its own`,
      );
    }
    return problems;
  }

  /** What is wrong with a sandbox's grants, each naming its field; empty when nothing is (I2, I3). */
  grantProblems(field: string, grants: SandboxConfig): string[] {
    return this.checkGrants(field, grants).problems;
  }

  /**
   * I2, I3: the grants (and the program's paths) resolved as the kernel would, each checked where it leads
   * (./grants.ts), and the network grants; with the resolutions, which a sandbox's plan then binds as they are.
   */
  private checkGrants(
    field: string,
    grants: SandboxConfig,
    program: string[] = [],
  ): { problems: string[]; resolved: Map<string, ResolvedPath> } {
    const problems: string[] = [];
    const resolved = new Map<string, ResolvedPath>();
    const places = this.places();
    const writable = this.writableGrants();
    const byName = this.status?.bwrap?.bindsFds === false;
    const check = (label: string, p: string, mode: 'ro' | 'rw') => {
      const way = resolvePath(p, probePath);
      resolved.set(p, way);
      const problem =
        wayProblem(label, mode, way, places, writable) ??
        (byName ? byNameProblem(label, way.real, writable) : undefined);
      if (problem) problems.push(problem);
    };
    for (const p of program) check(`its program ${p}`, p, 'ro');
    for (const [kind, mode] of [
      ['read', 'ro'],
      ['write', 'rw'],
    ] as const) {
      for (const [i, granted] of grants[kind].entries()) {
        const p = path.resolve(this.config.baseDir, granted);
        if (!fs.existsSync(p)) problems.push(`${field}.${kind}[${i}]: ${p} does not exist`);
        else check(`${field}.${kind}[${i}]: ${p}`, p, mode);
      }
    }
    if (grants.network === 'host') return { problems, resolved };
    const temporal = parseGrant(this.config.temporal.address);
    for (const [i, grant] of grants.network.entries()) {
      const g = grantOf(grant);
      if (g.port === temporal.port && (g.host === temporal.host || sameLoopback(g.host, temporal.host))) {
        problems.push(
          `${field}.network[${i}]: ${g.host}:${g.port} is the Temporal frontend, which would let it act for every tenant`,
        );
      }
    }
    return { problems, resolved };
  }
}

function sameLoopback(a: string, b: string): boolean {
  const loop = (h: string) => h === 'localhost' || h.startsWith('127.') || h === '::1';
  return loop(a) && loop(b);
}

/** Where a path really is, its links followed; a file not there yet, where its folder really is. */
function realPath(p: string): string {
  for (const resolve of [
    fs.realpathSync,
    (q: string) => path.join(fs.realpathSync(path.dirname(q)), path.basename(q)),
  ]) {
    try {
      return resolve(p);
    } catch {
      // not there: try its folder, else take it as written
    }
  }
  return path.resolve(p);
}

function isFile(p: string): boolean {
  try {
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

function probePath(p: string): PathKind {
  try {
    const stat = fs.lstatSync(p);
    if (stat.isSymbolicLink()) return { kind: 'symlink', target: fs.readlinkSync(p) };
    return stat.isDirectory() ? { kind: 'dir' } : { kind: 'file' };
  } catch {
    return { kind: 'missing' };
  }
}

/** The forwarder's compiled script (the sources run under ts-jest, the node from dist/). */
function forwarderScript(): string {
  return __filename.endsWith('.ts')
    ? path.join(projectRoot(), 'dist', 'activities', 'sandbox', 'forwarder.js')
    : path.join(__dirname, 'forwarder.js');
}

/** Why no sandbox can start here, with how to fix it; undefined when an empty one starts and exits 0. */
function probeProblem(bwrap: FoundBwrap, dropTo: { uid: number; gid: number } | undefined): string | undefined {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-probe-'));
  try {
    const plan: SandboxPlan = {
      command: '/bin/true',
      args: [],
      cwd: dir,
      read: [],
      write: [],
      hidden: [],
      network: 'none',
      dropTo: dropTo && { ...dropTo, setpriv: resolveCommand('setpriv') },
    };
    if (dropTo) fs.chownSync(dir, dropTo.uid, dropTo.gid);
    const run = spawnSync(bwrap.path, bwrapArgs(plan, probePath), { encoding: 'utf8', timeout: 10_000 });
    if (run.status === 0) return undefined;
    const said = `${run.stderr ?? ''}${run.error ? run.error.message : ''}`.trim().split('\n').slice(-2).join(' ');
    return `bubblewrap at ${bwrap.path} (${bwrap.from}) could not make a sandbox (${said || `exit ${run.status}`}): ${hintFor(said, dropTo !== undefined)}`;
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

function hintFor(said: string, root: boolean): string {
  if (/setpriv/.test(said)) return "the node runs as root and needs util-linux's setpriv to drop to the sandbox user";
  if (/mount proc/i.test(said)) {
    return 'the container hides parts of /proc, so a sandbox cannot mount its own: run it with `security_opt: [systempaths=unconfined]` (docs/deploy.md)';
  }
  if (root) return 'as root the node needs CAP_SYS_ADMIN to make namespaces; see docs/isolation.md';
  return 'this machine does not let the node make user namespaces: `sysctl kernel.unprivileged_userns_clone=1` (Debian), `user.max_user_namespaces` above 0, on Ubuntu 24.04 `kernel.apparmor_restrict_unprivileged_userns=0` or an AppArmor profile for bwrap; in a container, the security options in docs/deploy.md';
}
