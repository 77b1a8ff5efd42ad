/**
 * The node's MCP servers (SPEC "Words"): one shared process per plugin, one process per job for a sandboxed
 * server, one Streamable HTTP connection per remote server (with a session on 2025-11-25 and older, none on
 * 2026-07-28). Connections start on first use and start again after they die.
 *
 * A remote server that takes each tenant's own credentials (R1) gets one connection per (tenant, server): a
 * connection, and its 2025-11-25 session, is one tenant's identity at the server and is never shared. The tokens and
 * discovery of each tenant's OAuth client outlive its connections (./credentials.ts); an idle tenant connection is
 * closed as an idle sandbox is. So is a plugin whose `args` or `env` name `{tenant}` (I2): one process per (tenant,
 * server), given that tenant's name there, never another tenant's calls.
 */
import fs from 'node:fs';
import { getDefaultEnvironment } from '@modelcontextprotocol/client/stdio';
import type { ClientCapabilities, Tool, Transport } from '@modelcontextprotocol/client';
import { isRemote, namesTenant, perTenant, serverKind } from '../common/config';
import type { LoadedConfig, ServerConfig, ServerKind, StdioServerConfig } from '../common/config';
import type { Logger } from '../common/logger';
import {
  CannotStart,
  NotAuthorized,
  NothingSent,
  lastingStartFailure,
  OutcomeUnknown,
  ProcessTransport,
  ServerConnection,
  messageBound,
  connectClient,
  createRemoteTransport,
  envSecrets,
  rateLimited,
  TenantCredentials,
  resolveEnvRefs,
} from '../mcp';
import type { EraVerdicts, TenantCredential } from '../mcp';
import { besideConfig, launchProblem } from './launch';
import { installedLaunch } from './packages';
import { fillTenant } from '../model/checks';
import { Isolation } from './sandbox';
import { makeFreshFolder, sandboxFolderName } from './sandbox/folders';
import type { JobRef } from './sandbox/folders';
import type { JobHolder } from './ended-jobs';

export type { ServerKind, JobRef };
export { ServerConnection };

export interface PoolOptions {
  config: LoadedConfig;
  logger: Logger;
  /** How sandboxed servers start (I1-I6); by default one of the pool's own. */
  isolation?: Isolation;
  /** Root of this node's sandbox folders. */
  sandboxRoot: string;
  killGraceMs?: number;
  /**
   * I12: failures quote a shared server's stderr too: the operator's own tools (`oz0 plugin test`, `oz0 policy
   * approve`). A node never does: a plugin's stderr may hold any tenant's words.
   */
  quoteSharedStderr?: boolean;
}

/** A lease on a connection: release it when the attempt is over. */
export interface Lease {
  connection: ServerConnection;
  release(): void;
}

export class ServerPool implements JobHolder {
  private readonly connections = new Map<string, Promise<ServerConnection>>();
  /** Pool id → the job that owns it, for sandboxed servers. */
  private readonly owners = new Map<string, JobRef>();
  /** Pool id → its sandbox's folder, made fresh at its first start and kept while the pool holds it (I2). */
  private readonly folders = new Map<string, string>();
  /** What each stdio server answered to the protocol probe: its next process (a restart, a sandbox) is not asked. */
  private readonly verdicts: EraVerdicts = new Map();
  private reaper?: NodeJS.Timeout;
  readonly isolation: Isolation;
  /** R1-R2: each tenant's credentials for each per-tenant remote server, as this node holds them. */
  readonly credentials: TenantCredentials;

  constructor(private readonly opts: PoolOptions) {
    // A pool that made its own isolation (a CLI command's) closes it; a node closes the one it shares.
    this.isolation = opts.isolation ?? new Isolation(opts.config, opts.logger);
    this.credentials = new TenantCredentials(opts.config, (server) => {
      const config = this.serverConfig(server);
      return config && isRemote(config) ? resolveEnvRefs(config.headers, process.env, `servers.${server}.headers`) : {};
    });
    const idleMs = opts.config.node.sandboxIdleSeconds * 1000;
    this.reaper = setInterval(() => void this.reapIdleSandboxes(idleMs), Math.min(idleMs, 60_000));
    this.reaper.unref();
  }

  serverConfig(server: string): ServerConfig | undefined {
    return Object.hasOwn(this.opts.config.servers, server) ? this.opts.config.servers[server] : undefined;
  }

  kindOf(config: ServerConfig): ServerKind {
    return serverKind(config);
  }

  /**
   * A connection to `server` for a call of a job: the job's own when the server is sandboxed, the tenant's own when it
   * takes tenants' credentials (a tenant without is refused: {@link TenantCredentials.missing}).
   */
  async acquire(server: string, owner: JobRef): Promise<Lease> {
    const config = this.serverConfig(server);
    if (!config) throw new Error(`this node has no server named "${server}"`);
    const kind = this.kindOf(config);
    const credential = this.credentialFor(server, config, owner.tenant);
    const id =
      kind === 'sandbox'
        ? sandboxId(server, owner)
        : credential
          ? tenantId(server, credential.tenant)
          : namesTenant(config)
            ? tenantId(server, owner.tenant)
            : server;
    let pending = this.connections.get(id);
    if (pending) {
      const existing = await pending.catch(() => undefined);
      if (!existing || existing.closed) {
        if (this.connections.get(id) === pending) this.connections.delete(id);
        pending = undefined;
      }
    }
    if (!pending) {
      pending = this.open(id, server, kind, config, owner, {}, credential);
      this.connections.set(id, pending);
      if (kind === 'sandbox') this.owners.set(id, owner);
      pending.catch(() => {
        if (this.connections.get(id) === pending) this.connections.delete(id);
      });
    }
    const connection = await pending;
    return { connection, release: connection.use() };
  }

  /**
   * The listing `server` gives a client that offers `capabilities` (oz0's own offers none): a session of its own,
   * opened, read and closed here. A server may list some functions only to clients that offer sampling, elicitation
   * or roots; this is how oz0 tells which (mcp/capabilities.ts). Requests the server then sends it are refused.
   */
  async listingFor(server: string, capabilities: ClientCapabilities, tenant?: string): Promise<Tool[]> {
    const config = this.serverConfig(server);
    if (!config) throw new Error(`this node has no server named "${server}"`);
    const kind = this.kindOf(config);
    const probe: JobRef = {
      tenant: tenant ?? 'oz0',
      jobId: `oz0-probe-${Object.keys(capabilities).join('-')}-${process.pid}-${Date.now().toString(36)}`,
    };
    const credential = this.credentialFor(server, config, tenant);
    const id = `probe:${server}@${probe.jobId}`;
    const connection = await this.open(id, server, kind, config, probe, capabilities, credential);
    try {
      return await connection.listTools(true);
    } finally {
      await connection.close();
      this.removeFolder(id);
    }
  }

  private async open(
    id: string,
    server: string,
    kind: ServerKind,
    config: ServerConfig,
    owner: JobRef,
    capabilities: ClientCapabilities = {},
    credential?: TenantCredential,
  ): Promise<ServerConnection> {
    const { jobId } = owner;
    // A server that cannot be launched at all is said as it is, before any connect (its problem names the script).
    const transportFor = isRemote(config)
      ? (): Transport =>
          createRemoteTransport(
            server,
            config,
            process.env,
            credential,
            this.credentials.guarded,
            messageBound(this.opts.config.node.maxResultMiB),
          )
      : this.processTransportFor(this.processSource(config, kind, server, id, owner), kind, server, jobId);
    const { logger } = this.opts;
    let opened: ServerConnection;
    try {
      opened = await connectClient({
        server,
        kind,
        choice: config.protocol,
        capabilities,
        transportFor,
        // Only a process is remembered: its next copy is the same program; a remote server may change between connects.
        verdicts: isRemote(config) ? undefined : this.verdicts,
        logger,
        onclose: (connection) => {
          connection.closed = true;
          logger.info({ server, kind, jobId: kind === 'sandbox' ? jobId : undefined }, 'server connection closed');
        },
      });
    } catch (err) {
      // R4: the tenant's authorization failed, in words of its own (busy when its authorization server is).
      const end = credential?.end(err);
      if (end) throw new NotAuthorized(end);
      const why = `could not start server "${server}": ${(err as Error).message}`;
      // B4: a 429 on the connection's own requests says nothing about a call: its outcome is unknown.
      if (rateLimited(err)) throw new OutcomeUnknown(why);
      logger.warn(
        { server, kind, jobId: kind === 'sandbox' ? jobId : undefined, err: why },
        'a server could not start',
      );
      // S2: a start no other try gets past (a refused sandbox, a missing program) costs one attempt.
      throw lastingStartFailure(err) ? new CannotStart(why, { cause: err }) : new NothingSent(why);
    }
    logger.info(
      { server, kind, protocol: opened.protocol, ...(credential && { tenant: credential.tenant }) },
      'server connection open',
    );
    return opened;
  }

  /** R1: the tenant's credential for a per-tenant server; none for any other. Refused when the tenant has none. */
  private credentialFor(
    server: string,
    config: ServerConfig,
    tenant: string | undefined,
  ): TenantCredential | undefined {
    if (!perTenant(config)) return undefined;
    const missing = this.credentials.missing(server, tenant);
    if (missing) throw new Error(missing);
    return this.credentials.of(server, tenant!);
  }

  private processTransportFor(
    { source, secrets }: ReturnType<ServerPool['processSource']>,
    kind: ServerKind,
    server: string,
    jobId: string,
  ): () => Transport {
    return () =>
      new ProcessTransport(source, {
        secrets,
        // The config's graces unless told otherwise (so `oz0 policy approve` and the drill stop servers as a node does).
        killGraceMs: this.opts.killGraceMs ?? this.opts.config.node.killGraceSeconds * 1000,
        stdinGraceMs: this.opts.config.node.stdinGraceSeconds * 1000,
        logger: this.opts.logger,
        label: kind === 'sandbox' ? `${server} (sandbox of ${jobId})` : server,
        quoteStderr: kind === 'sandbox' || this.opts.quoteSharedStderr === true,
        boundStderr: kind === 'sandbox',
        // D1: an answer past the node's bound is dropped as it comes (its envelope's bytes allowed for).
        maxMessageBytes: messageBound(this.opts.config.node.maxResultMiB),
      });
  }

  /**
   * A plugin's plain process (the platform's own code, I), or how the job's sandbox starts; and its secrets (what its
   * `env` takes from the node's environment), cut out of its stderr wherever that is shown.
   */
  private processSource(template: StdioServerConfig, kind: ServerKind, server: string, id: string, owner: JobRef) {
    // I2: `{tenant}` in its args and env is the name of the tenant whose process (or sandbox) this is.
    let config: StdioServerConfig;
    try {
      config = forTenantOf(template, owner.tenant);
    } catch (err) {
      throw new CannotStart(`server "${server}": ${(err as Error).message}`);
    }
    // Relative paths are the config's folder's, whatever folder the server runs in (a sandbox has its own).
    const { baseDir } = this.opts.config;
    // S1: a server named by its package runs from the node's install of it (read-only in a sandbox).
    const installed = config.package ? installedLaunch(this.opts.config, server, config) : undefined;
    if (installed && 'problem' in installed) throw new CannotStart(installed.problem);
    const launch = installed ?? besideConfig(baseDir, config);
    const problem = launchProblem(`server "${server}"`, this.opts.config, launch);
    if (problem) throw new CannotStart(problem);
    const env = resolveEnvRefs(config.env, process.env, `servers.${server}.env`);
    const secrets = envSecrets(config.env, env);
    if (kind === 'plugin' || !config.sandbox) {
      const { command, args } = launch;
      return { source: { command, args, cwd: baseDir, env: { ...getDefaultEnvironment(), ...env } }, secrets };
    }
    const grants = config.sandbox;
    const source = async () => {
      // The same folder for every process of this sandbox while the pool holds it (a server that crashed starts
      // again with its files), a fresh one otherwise.
      let cwd = this.folders.get(id);
      if (!cwd || !fs.existsSync(cwd)) {
        cwd = makeFreshFolder(this.opts.sandboxRoot, sandboxFolderName(owner, server), this.opts.logger);
        this.folders.set(id, cwd);
      }
      return this.isolation.start({
        who: `server "${server}" (sandbox of ${owner.jobId})`,
        field: `servers.${server}.sandbox`,
        command: launch.command,
        args: launch.args,
        cwd,
        env,
        grants,
        tenant: owner.tenant,
        packages: installed ? [installed.dir] : [],
      });
    };
    return { source, secrets };
  }

  /** Stops every sandboxed server of a job on this node (its whole process trees). */
  async releaseJob(owner: JobRef): Promise<number> {
    const ids = this.sandboxesOf(owner);
    await Promise.all(ids.map((id) => this.stop(id)));
    return ids.length;
  }

  /** I9: a job that ended in any way (./ended-jobs.ts): its sandboxed servers on this node are stopped. */
  release(owner: JobRef, why: string): Promise<number> {
    this.opts.logger.info({ jobId: owner.jobId, why }, 'stopping the sandboxed servers of a job that ended');
    return this.releaseJob(owner);
  }

  /** Stops the sandboxed server of one job. */
  stopSandbox(server: string, owner: JobRef): Promise<void> {
    return this.stop(sandboxId(server, owner));
  }

  /** Whether a job has a sandboxed server running on this node. */
  hasSandbox(owner: JobRef): boolean {
    return this.sandboxesOf(owner).length > 0;
  }

  /** The jobs whose sandboxed servers run on this node (I9: the node asks Temporal whether each is still running). */
  jobs(): JobRef[] {
    const seen = new Map<string, JobRef>();
    for (const owner of this.owners.values()) seen.set(ownerKey(owner), owner);
    return [...seen.values()];
  }

  private sandboxesOf(owner: JobRef): string[] {
    const key = ownerKey(owner);
    return [...this.owners].filter(([, o]) => ownerKey(o) === key).map(([id]) => id);
  }

  private async stop(id: string): Promise<void> {
    const pending = this.connections.get(id);
    if (!pending) return;
    this.connections.delete(id);
    this.owners.delete(id);
    const connection = await pending.catch(() => undefined);
    await connection?.close();
    this.removeFolder(id);
  }

  /** Removes a sandbox's folder once its process is gone (its job's end, or an idle sandbox). */
  private removeFolder(id: string): void {
    const dir = this.folders.get(id);
    this.folders.delete(id);
    if (dir) fs.rmSync(dir, { recursive: true, force: true });
  }

  /** Stops sandboxed servers, and closes tenants' connections (R1), unused this long. */
  private async reapIdleSandboxes(idleMs: number): Promise<void> {
    const now = Date.now();
    for (const [id, pending] of this.connections) {
      if (!id.startsWith('sandbox:') && !id.startsWith('tenant:')) continue;
      const connection = await pending.catch(() => undefined);
      if (connection && !connection.busy && now - connection.lastUsed > idleMs) {
        if (id.startsWith('sandbox:')) this.opts.logger.info({ sandbox: id }, 'stopping an idle sandboxed server');
        else this.opts.logger.info({ connection: id }, "closing an idle tenant's connection");
        await this.stop(id);
      }
    }
  }

  /** Stops every server this node started, and removes the node's sandbox folder. */
  async close(): Promise<void> {
    clearInterval(this.reaper);
    await Promise.all([...this.connections.keys()].map((id) => this.stop(id)));
    fs.rmSync(this.opts.sandboxRoot, { recursive: true, force: true });
    if (!this.opts.isolation) await this.isolation.close();
  }
}

/** A stdio server's config as one tenant's process runs it: `{tenant}` in its `args` and `env` values filled (I2). */
function forTenantOf(config: StdioServerConfig, tenant: string): StdioServerConfig {
  if (!namesTenant(config)) return config;
  const env = Object.fromEntries(Object.entries(config.env).map(([k, v]) => [k, fillTenant(v, tenant)]));
  return { ...config, args: config.args.map((a) => fillTenant(a, tenant)), env };
}

/** Pool id of a tenant's own connection to a per-tenant server (R1), or of its own process of a plugin (I2). */
function tenantId(server: string, tenant: string): string {
  return `tenant:${server}@${tenant}`;
}

/** Pool id of a job's sandboxed server: the tenant's too, so a job id taken again by another tenant is another sandbox. */
function sandboxId(server: string, owner: JobRef): string {
  return `sandbox:${server}@${ownerKey(owner)}`;
}

function ownerKey(owner: JobRef): string {
  return JSON.stringify([owner.tenant, owner.jobId]);
}
