/**
 * The tenant boundary (SPEC I1-I8): every process a node starts on a job's behalf that is not the platform's shared
 * code — a sandboxed server, a harness — runs in a bubblewrap sandbox of its own: namespaces, no capabilities,
 * `no_new_privs`, an unprivileged uid, only its grants in view (./plan.ts), no network but its grants (./network.ts)
 * and limits the node watches (./limits.ts); still the leader of its own process group, so every stop (C3, C7, H5,
 * H7) works as before. A node that cannot isolate refuses, saying what is missing (I6), unless its config says
 * `node.isolation: "none"`.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import type net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { LoadedConfig, SandboxConfig } from '../../common/config';
import type { Logger } from '../../common/logger';
import { resolveCommand, spawnGroup, startGroup } from '../../common/process-group';
import type { Started } from '../../common/process-group';
import { bwrapBindsFds, bwrapVersion, findBwrap } from './bwrap';
import type { BwrapFound, FoundBwrap } from './bwrap';
import { handOver, handedBytes } from './disk';
import { closeInheritedOnExec } from './ffi';
import { nodeGaps, sandboxGaps } from './holds';
import type { NodeLimits } from './holds';
import { detectLimits, removeStaleGroups } from './limits';
import type { LimitsBackend, LimitsHandle } from './limits';
import { describeForwarder, forwarderCommand, provideForwarder } from './native-forwarder';
import type { Forwarder } from './native-forwarder';
import { SandboxNetwork } from './network';
import { letSandboxesWrite } from './acl';
import { bwrapArgs, resolvePath, within } from './plan';
import type { SandboxPlan } from './plan';
import { ChangedWhileStarting, PinnedPaths } from './grants';
import { programPaths } from './program';
import { Hidden } from './hidden';
import { gitConfigFor } from './git';
import { alive, probePath, probeProblem } from './probe';
import { forTenant, makeTenantFolders, perTenant } from './tenant-grants';
import { sandboxFilter } from './seccomp';
import { UidLeases } from './uids';
import type { UidLease } from './uids';
import { watchSandbox } from './watch';
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
  /** The tenant whose sandbox it is: its grants' `{tenant}` (./tenant-grants.ts). */
  tenant: string;
  /** S1: the installs of the packages it runs (activities/packages.ts), read-only. */
  packages?: string[];
  /** A harness's gateway, reached at the same 127.0.0.1 port inside as outside (H3). */
  gateway?: { port: number; accept(socket: net.Socket): void; maxConnections?: number };
}

/** What a node can do about isolation, said at start and by `oz0 plugin test` (I6). */
export interface IsolationStatus {
  mode: 'bwrap' | 'none';
  /** Why this node cannot isolate, and how to get it; undefined when it can (or isolation is off). */
  problem?: string;
  /** How limits are held (`cgroup v1`, …), what they cannot hold for any sandbox (I4), and why no control group. */
  limits?: { kind: string; gaps: string[]; why: string[] };
  /** I1: the system-call filter every sandbox gets: libseccomp's version and the rules it holds. */
  seccomp?: { libseccomp: string; rules: number };
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

/** Isolations made in this process (tests run several nodes in one). */
let instances = 0;

/**
 * I1, I2: with a uid of its own, a sandbox creates files its group (`node.sandboxGid`, every sandbox's) may write: a
 * write grant is shared by every sandbox of its server, and a key store one sandbox made there is written by the
 * next (a retry's). A file it wants to itself, it makes so (chmod).
 */
const SHARED_UMASK = ['/bin/sh', '-c', 'umask 0002 && exec "$@"', 'oz0-umask'];

/** I1: the user the probe sandbox drops to as root (nobody): it runs no tenant's code, so it leases no uid. */
const PROBE_UID = 65534;

export class Isolation {
  private status?: IsolationStatus;
  private limits?: LimitsBackend;
  /** This node's folder of control groups: its pid (a later node removes it once that pid is gone), and its own number. */
  private readonly tag = `node-${process.pid}-${++instances}`;
  /** I1: as root, each sandbox drops to a uid of its own, leased from `node.sandboxUids`; otherwise it has the node's. */
  private readonly uids?: UidLeases;
  /** The /etc/passwd a sandbox sees, with its own uid's line added (as root); the node's is read once. */
  private passwd?: string;

  /** I2: what no sandbox may see, and each sandbox's grants checked against it. */
  readonly hidden: Hidden;

  constructor(
    private readonly config: LoadedConfig,
    private readonly logger: Logger,
    /** O1: counts sandboxes started and stopped. */
    private readonly metrics?: NodeMetrics,
    /** I8: the bwrap to run, as the node found or installed it (worker/bubblewrap.ts); found here by default. */
    private bwrap?: BwrapFound,
    /** I3, I7: the forwarder a sandbox whose network is its own runs; provided (built) on first need by default. */
    private forwarder?: Forwarder,
  ) {
    if (process.getuid?.() === 0) this.uids = new UidLeases(config.node.sandboxUids);
    this.hidden = new Hidden(config, () => this.status?.bwrap?.bindsFds === false);
  }

  /** I6: whether sandboxes can start here, found once by starting an empty one. */
  check(): IsolationStatus {
    if (this.status) return this.status;
    if (this.config.node.isolation === 'none') return (this.status = { mode: 'none' });
    const bwrap = (this.bwrap ??= findBwrap({ configured: this.config.node.bwrap, baseDir: this.config.baseDir }));
    if ('missing' in bwrap) return (this.status = { mode: 'bwrap', problem: bwrap.missing });
    let filter: ReturnType<typeof sandboxFilter>;
    try {
      closeInheritedOnExec();
      filter = sandboxFilter();
    } catch (err) {
      return (this.status = {
        mode: 'bwrap',
        problem: `no sandbox can get its system-call filter (I1): ${(err as Error).message}`,
      });
    }
    const drop = this.uids && { uid: PROBE_UID, gid: this.config.node.sandboxGid };
    const problem = probeProblem(bwrap, drop, filter.bpf);
    if (problem) return (this.status = { mode: 'bwrap', problem });
    removeStaleGroups(alive);
    try {
      this.limits = detectLimits(this.tag, this.config.node.limitsBy);
    } catch (err) {
      return (this.status = {
        mode: 'bwrap',
        problem: `no sandbox's limits can be held (I4): ${(err as Error).message}`,
      });
    }
    return (this.status = {
      mode: 'bwrap',
      limits: { kind: this.limits.kind, gaps: nodeGaps(this.nodeLimits()), why: this.limits.why },
      seccomp: { libseccomp: filter.libseccomp, rules: filter.rules },
      bwrap: {
        ...bwrap,
        version: bwrapVersion(bwrap.path) ?? 'of unknown version',
        bindsFds: bwrapBindsFds(bwrap.path),
      },
    });
  }

  /** I7: the forwarder this node's sandboxes run (oz0's native one, built now if need be), found once. */
  forwarderInUse(): Forwarder {
    return (this.forwarder ??= provideForwarder({ log: (line) => this.logger.info(line) }));
  }

  /** Whether any sandbox of this node's config has a network of its own, led through a forwarder. */
  private needsForwarder(): boolean {
    // A harness's gateway is always led in; a server's network only when it is granted hosts.
    if (Object.keys(this.config.harnesses).length > 0) return true;
    return Object.values(this.config.servers).some(
      (s) => 'command' in s && s.sandbox && s.sandbox.network !== 'host' && s.sandbox.network.length > 0,
    );
  }

  /** What this node's limits are held by, for ./holds.ts. */
  private nodeLimits(): NodeLimits {
    return {
      kind: this.limits!.kind,
      cpuShare: this.limits!.cpuShare,
      ownUid: this.uids !== undefined,
      kernel: os.release(),
    };
  }

  /** I4: what this node cannot hold of a sandbox's limits; empty when it holds them all. */
  limitGaps(grants: SandboxConfig): string[] {
    const status = this.check();
    if (status.mode === 'none' || status.problem) return [];
    return sandboxGaps(this.nodeLimits(), grants);
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
      lines.push({
        level: 'info',
        text: `sandboxes: ${describeBwrap(status.bwrap!)}, limits by ${limits.kind}${this.config.node.limitsBy !== 'auto' ? ' (node.limitsBy)' : limits.why.length ? ` (no control group it may write: ${limits.why.join('; ')})` : ''}, system calls filtered (Docker's default profile and more, libseccomp ${status.seccomp!.libseccomp})`,
      });
      if (this.config.node.limits === 'best-effort') {
        for (const gap of limits.gaps)
          lines.push({ level: 'warn', text: `sandbox limits, best-effort (node.limits): ${gap}` });
      }
      if (this.needsForwarder()) {
        const forwarder = this.forwarderInUse();
        lines.push({
          level: forwarder.kind === 'native' ? 'info' : 'warn',
          text: `sandbox networks: ${describeForwarder(forwarder)}`,
        });
      }
      if (!status.bwrap!.bindsFds) {
        lines.push({
          level: 'warn',
          text: `sandbox grants: ${describeBwrap(status.bwrap!)} binds by name (no --ro-bind-fd), so a grant inside a folder a sandbox may write is refused; bubblewrap 0.10 or later binds what the node checked`,
        });
      }
    }
    if (status.mode !== 'none') {
      // I2, S4: what is hidden, and why: what the config declares, nothing guessed.
      const hidden = this.hidden.secretPlaces().map((p) => `${p.path} (${p.what})`);
      lines.push({ level: 'info', text: `hidden from every sandbox: ${hidden.join('; ')}` });
    }
    for (const [who, field, grants] of sandboxed) {
      if (grants.network === 'host') {
        lines.push({ level: 'warn', text: `${who} shares this node's network (sandbox.network: "host")` });
      }
      // I2: a write grant without {tenant} is one folder for every tenant's sandboxes of it.
      for (const [i, w] of grants.write.entries()) {
        if (perTenant(w)) continue;
        lines.push({
          level: 'warn',
          text: `${who}: its write grant ${path.resolve(this.config.baseDir, w)} (${field}.write[${i}]) is shared by every tenant's sandboxes of it; "${path.join(w, '{tenant}')}" gives each tenant a folder of its own`,
        });
      }
      if (status.mode === 'none') continue;
      for (const problem of [...this.hidden.checkGrants(field, grants).problems, ...this.hidden.envProblems(field)])
        lines.push({ level: 'error', text: `${who} cannot start: ${problem}` });
      if (status.problem) continue;
      const gaps = this.limitGaps(grants).filter((g) => !status.limits!.gaps.includes(g));
      const held = this.config.node.limits === 'best-effort';
      if (held)
        for (const gap of gaps) lines.push({ level: 'warn', text: `${who}: best-effort (node.limits): ${gap}` });
      else if (gaps.length || status.limits!.gaps.length) {
        lines.push({ level: 'error', text: `${who} cannot start: ${this.refusal(grants)}` });
      }
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
    const hidden = this.hidden.hiddenPaths();
    const absolute = (p: string) => path.resolve(this.config.baseDir, p);
    // I2: a grant that names {tenant} is this tenant's folder, made here the first time (before it is checked).
    try {
      makeTenantFolders(req.grants.write.map(absolute), req.tenant, this.uids && this.config.node.sandboxGid);
    } catch (err) {
      throw new IsolationRefused(
        `${req.who} cannot start: ${req.field}.write: the folder of tenant "${req.tenant}" cannot be made: ${(err as Error).message}`,
      );
    }
    const grants = forTenant(req.grants, req.tenant);
    const read = grants.read.map(absolute);
    const write = grants.write.map(absolute);
    // S1: what a package's install holds is bound with it, read-only: the node made it (outside every sandbox).
    const packages = req.packages ?? [];
    const program = programPaths(command, req.args, write).filter(
      (p) => p === command || !packages.some((d) => within(p, d)),
    );
    // I2: resolved once, here: what is checked is what the plan binds (through descriptors opened after the check).
    const checked = this.hidden.checkGrants(req.field, grants, program);
    const problem = [...checked.problems, ...this.hidden.envProblems(req.field, req.tenant)][0];
    if (problem) throw new IsolationRefused(`${req.who} cannot start: ${problem}`);
    if (this.limitGaps(grants).length && this.config.node.limits !== 'best-effort') {
      throw new IsolationRefused(`${req.who} cannot start: ${this.refusal(grants)}`);
    }
    checked.resolved.set(req.cwd, resolvePath(req.cwd, probePath));
    let lease: UidLease | undefined;
    let network: SandboxNetwork | undefined;
    let limits: LimitsHandle | undefined;
    let pins: PinnedPaths | undefined;
    try {
      closeInheritedOnExec();
      lease = this.uids?.acquire();
      // A node that died left files of this uid in grants: they are handed over before the uid runs again.
      if (lease) for (const grant of lease.leftBehind) await handOver(grant, lease.uid);
      lease?.record(write);
      // I12: what earlier sandboxes left in its grants (handed over) is measured before it starts: what they grow by
      // while it runs counts against it.
      const handedAtStart = lease && write.length ? await handedBytes(write, this.config.node.sandboxUids) : 0;
      const dropTo = lease && { uid: lease.uid, gid: this.config.node.sandboxGid };
      // S4: a write grant works on a folder as its owner left it (one ACL entry for the sandboxes' group).
      if (dropTo) {
        for (const [i, grant] of write.entries()) {
          const problem = await letSandboxesWrite(checked.resolved.get(grant)?.real ?? grant, dropTo.gid);
          if (problem) throw new IsolationRefused(`${req.who} cannot start: ${req.field}.write[${i}]: ${problem}`);
        }
      }
      if (dropTo) fs.chownSync(req.cwd, dropTo.uid, dropTo.gid);
      const destinations = grants.network === 'host' ? [] : grants.network;
      if (grants.network !== 'host' && (destinations.length > 0 || req.gateway)) {
        network = await SandboxNetwork.open({
          grants: destinations,
          dnsServers: this.config.node.dnsServers,
          gateway: req.gateway,
          owner: dropTo,
          logger: this.logger,
          who: req.who,
        });
      }
      // S4: git takes its grants for the safe directories they are, though another user owns them.
      const gitconfig = gitConfigFor([...read, ...write]);
      limits = this.limits!.create(`sandbox-${randomBytes(6).toString('hex')}`, grants);
      const sized = this.status!.bwrap!.version.localeCompare('0.10.0', undefined, { numeric: true }) >= 0;
      const plan: SandboxPlan = {
        command,
        args: req.args,
        cwd: req.cwd,
        read: [...program, ...read],
        write,
        resolved: checked.resolved,
        hidden,
        packages,
        network: grants.network === 'host' ? 'host' : 'none',
        dropTo: dropTo && { ...dropTo, setpriv: resolveCommand('setpriv') },
        runDir: network?.runDir,
        forwarder: network && { command: forwarderCommand(this.forwarderInUse()), listeners: network.listeners },
        env: Object.hasOwn(req.env, 'PWD') ? undefined : resolveCommand('env'),
        seccompFd: 3,
        passwdFd: dropTo ? 4 : undefined,
        gitconfigFd: gitconfig === undefined ? undefined : dropTo ? 5 : 4,
        tmpBytes: sized ? grants.diskMiB * 1024 * 1024 : undefined,
        shmBytes: sized ? grants.memoryMiB * 1024 * 1024 : undefined,
        inside: [...(dropTo ? SHARED_UMASK : []), ...limits.inside],
      };
      if (plan.forwarder) plan.read.push(...plan.forwarder.command);
      // Handed to bwrap at 3, 4, …: the filter, the passwd naming its uid, its gitconfig, its own arguments, then the
      // descriptors of what it binds.
      const data = [
        sandboxFilter().bpf,
        ...(dropTo ? [Buffer.from(this.passwdFor(dropTo, req.cwd))] : []),
        ...(gitconfig === undefined ? [] : [Buffer.from(gitconfig)]),
      ];
      const argsFd = 3 + data.length;
      const bound = (pins = new PinnedPaths(argsFd + 1));
      // I2: bound through the descriptors of what was checked, where this bwrap can (else by name: see byNameProblem).
      const pin = status.bwrap!.bindsFds ? (real: string) => bound.pin(real) : undefined;
      // I2: its options on a descriptor (`--args`), NUL-separated: the sandbox's first process is bwrap, whose
      // command line every process in it may read (/proc/1/cmdline), and they map all it binds and hides. Only what it
      // runs (after `--`) stays on the command line, where bwrap wants it.
      const args = bwrapArgs(plan, probePath, pin);
      const end = args.indexOf('--');
      if (end < 0) throw new Error('bwrap arguments without `--` before the command');
      data.push(
        Buffer.from(
          args
            .slice(0, end)
            .map((a) => `${a}\0`)
            .join(''),
        ),
      );
      const argv = [...limits.prefix, status.bwrap!.path, '--args', String(argsFd), ...args.slice(end)];
      const child = await spawnGroup({
        command: argv[0],
        args: argv.slice(1),
        cwd: req.cwd,
        env: { ...req.env, ...network?.env },
        data,
        fds: bound.fds,
      });
      const held = { lease, network };
      return watchSandbox({
        child,
        limits: grants,
        handle: limits,
        disk: {
          folder: req.cwd,
          grants: write,
          uid: lease?.uid,
          sandboxUids: this.config.node.sandboxUids,
          handedAtStart,
        },
        network,
        who: req.who,
        logger: this.logger,
        release: async () => {
          await held.network?.close();
          if (held.lease) {
            for (const grant of write) await handOver(grant, held.lease.uid);
            held.lease.release();
          }
        },
      });
    } catch (err) {
      await limits?.dispose();
      await network?.close();
      lease?.release();
      if (err instanceof ChangedWhileStarting) throw new IsolationRefused(`${req.who} cannot start: ${err.message}`);
      throw err;
    } finally {
      // bwrap holds them now (and closes each once it is mounted): the node's copies go.
      pins?.close();
    }
  }

  /** I4: why a sandbox is refused for its limits, with what would let it start. */
  private refusal(grants: SandboxConfig): string {
    return `its limits cannot all be held on this node, whose limits are by ${this.status!.limits!.kind} (I4): ${this.limitGaps(grants).join('; ')}; node.limits: "best-effort" runs it anyway, holding what it can`;
  }

  /** The node's /etc/passwd and a line for the sandbox's own uid (its folder its home), so programs find their user. */
  private passwdFor(user: { uid: number; gid: number }, home: string): string {
    this.passwd ??= fs.readFileSync('/etc/passwd', 'utf8').replace(/\n?$/, '\n');
    return `${this.passwd}oz0-sandbox:x:${user.uid}:${user.gid}:oz0 sandbox:${home}:/usr/sbin/nologin\n`;
  }
}
