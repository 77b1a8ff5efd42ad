/**
 * The node's MCP servers (SPEC "Words"): one shared process per plugin, one process per job for a sandboxed
 * server, one Streamable HTTP session per remote server. Connections start on first use and start again
 * after they die.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { getDefaultEnvironment } from '@modelcontextprotocol/sdk/client/stdio.js';
import { ProgressNotificationSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';
import type { JSONRPCMessage, ProgressNotification, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { isRemote } from '../../worker/config';
import type { LoadedConfig, ServerConfig, StdioServerConfig } from '../../worker/config';
import type { Logger } from '../../worker/logger';
import { ProcessTransport } from './process-transport';
import { createRemoteTransport } from './remote';
import { resolveEnvRefs } from './env';
import { parseRetryAfter } from '../verdicts';

export type ServerKind = 'plugin' | 'sandbox' | 'remote';

/** How long a server has to answer `initialize` before the attempt fails. */
const CONNECT_TIMEOUT_MS = 30_000;

/** One live MCP session with one server. */
export class ServerConnection {
  private listing?: Promise<Tool[]>;
  /** B4: calls (by key) whose own tools/call POST was answered 429, with the Retry-After in seconds. */
  private readonly rateLimited = new Map<string, { retryAfter?: number }>();
  /** A 429 on a request of the session that carried no call (initialize, the GET stream, a notification). */
  sessionRateLimited = false;
  private readonly progressWatchers = new Map<string, (params: ProgressNotification['params']) => void>();
  private inUse = 0;
  lastUsed = Date.now();
  closed = false;

  constructor(
    readonly server: string,
    readonly kind: ServerKind,
    readonly client: Client,
    private readonly transport: Transport,
  ) {
    client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      this.listing = undefined;
    });
  }

  /** The server's tools, cached for the session until it says its list changed; `fresh` reads them anew. */
  listTools(fresh = false): Promise<Tool[]> {
    if (fresh) this.listing = undefined;
    this.listing ??= this.fetchListing();
    return this.listing;
  }

  private async fetchListing(): Promise<Tool[]> {
    const tools: Tool[] = [];
    let cursor: string | undefined;
    try {
      do {
        const page = await this.client.listTools(cursor ? { cursor } : undefined, { timeout: CONNECT_TIMEOUT_MS });
        tools.push(...page.tools);
        cursor = page.nextCursor;
      } while (cursor && tools.length < 10_000);
    } catch (err) {
      this.listing = undefined;
      throw err;
    }
    return tools;
  }

  /**
   * Calls fn with each progress notification for `token`, as it arrives. oz0 reads progress off the
   * transport itself: the SDK hands notifications on a tick later than responses, so it drops the last
   * progress a server sends just before its answer.
   */
  watchProgress(token: string, fn: (params: ProgressNotification['params']) => void): () => void {
    this.progressWatchers.set(token, fn);
    return () => this.progressWatchers.delete(token);
  }

  /** Takes the notifications oz0 asked for; true when the message was one of them. */
  takeProgress(message: JSONRPCMessage): boolean {
    if (!('method' in message) || message.method !== 'notifications/progress') return false;
    const parsed = ProgressNotificationSchema.safeParse(message);
    if (!parsed.success) return false;
    const watcher = this.progressWatchers.get(String(parsed.data.params.progressToken));
    if (!watcher) return false;
    watcher(parsed.data.params);
    return true;
  }

  /** Sees every HTTP exchange of a remote session (B4): a 429 on a call's own POST is kept for that call. */
  onHttpExchange(exchange: { method: string; body: unknown; response: Response }): void {
    if (exchange.response.status !== 429) return;
    const messages = Array.isArray(exchange.body) ? exchange.body : [exchange.body];
    let forCall = false;
    for (const message of messages) {
      const call = message as { method?: unknown; params?: { _meta?: Record<string, unknown> } } | undefined;
      const key = call?.params?._meta?.['oz0/idempotency_key'];
      if (call?.method === 'tools/call' && typeof key === 'string') {
        this.rateLimited.set(key, { retryAfter: parseRetryAfter(exchange.response.headers.get('retry-after')) });
        forCall = true;
      }
    }
    if (!forCall) this.sessionRateLimited = true;
  }

  /** The 429 this call's own POST got, if any (once). */
  takeRateLimit(key: string): { retryAfter?: number } | undefined {
    const limited = this.rateLimited.get(key);
    this.rateLimited.delete(key);
    return limited;
  }

  get busy(): boolean {
    return this.inUse > 0;
  }

  use(): () => void {
    this.inUse++;
    this.lastUsed = Date.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inUse--;
      this.lastUsed = Date.now();
    };
  }

  /** Ends the session; for a process, stops its whole tree first. */
  async close(): Promise<void> {
    this.closed = true;
    await this.transport.close();
    await this.client.close().catch(() => undefined);
  }
}

export interface PoolOptions {
  config: LoadedConfig;
  logger: Logger;
  /** Root of this node's sandbox folders. */
  sandboxRoot: string;
  killGraceMs?: number;
}

/** A lease on a connection: release it when the attempt is over. */
export interface Lease {
  connection: ServerConnection;
  release(): void;
}

export class ServerPool {
  private readonly connections = new Map<string, Promise<ServerConnection>>();
  /** Pool id → the job that owns it, for sandboxed servers. */
  private readonly owners = new Map<string, string>();
  private reaper?: NodeJS.Timeout;

  constructor(private readonly opts: PoolOptions) {
    const idleMs = opts.config.node.sandboxIdleSeconds * 1000;
    this.reaper = setInterval(() => void this.reapIdleSandboxes(idleMs), Math.min(idleMs, 60_000));
    this.reaper.unref();
  }

  serverConfig(server: string): ServerConfig | undefined {
    return Object.hasOwn(this.opts.config.servers, server) ? this.opts.config.servers[server] : undefined;
  }

  kindOf(config: ServerConfig): ServerKind {
    return isRemote(config) ? 'remote' : config.sandbox ? 'sandbox' : 'plugin';
  }

  /** A connection to `server` for a call of `jobId`: the job's own when the server is sandboxed. */
  async acquire(server: string, jobId: string): Promise<Lease> {
    const config = this.serverConfig(server);
    if (!config) throw new Error(`this node has no server named "${server}"`);
    const kind = this.kindOf(config);
    const id = kind === 'sandbox' ? sandboxId(server, jobId) : server;
    let pending = this.connections.get(id);
    if (pending) {
      const existing = await pending.catch(() => undefined);
      if (!existing || existing.closed) {
        if (this.connections.get(id) === pending) this.connections.delete(id);
        pending = undefined;
      }
    }
    if (!pending) {
      pending = this.open(id, server, kind, config, jobId);
      this.connections.set(id, pending);
      if (kind === 'sandbox') this.owners.set(id, jobId);
      pending.catch(() => {
        if (this.connections.get(id) === pending) this.connections.delete(id);
      });
    }
    const connection = await pending;
    return { connection, release: connection.use() };
  }

  private async open(
    id: string,
    server: string,
    kind: ServerKind,
    config: ServerConfig,
    jobId: string,
  ): Promise<ServerConnection> {
    // The transport is made before its connection; the observer finds the connection through this.
    const ref: { connection?: ServerConnection } = {};
    const transport: Transport = isRemote(config)
      ? createRemoteTransport(server, config, process.env, (exchange) => ref.connection?.onHttpExchange(exchange))
      : new ProcessTransport(this.processSpec(config, kind, server, jobId), {
          killGraceMs: this.opts.killGraceMs,
          logger: this.opts.logger,
          label: kind === 'sandbox' ? `${server} (sandbox of ${jobId})` : server,
        });
    const client = new Client({ name: 'oz0', version: '0.1.0' }, { capabilities: {} });
    const opened = new ServerConnection(server, kind, client, transport);
    ref.connection = opened;
    client.onclose = () => {
      opened.closed = true;
      this.opts.logger.info({ server, kind, jobId: kind === 'sandbox' ? jobId : undefined }, 'server session closed');
    };
    client.onerror = (err) => {
      // A session being closed on purpose says "aborted" on its way out: not worth a warning.
      const level = opened.closed ? 'debug' : 'warn';
      this.opts.logger[level]({ server, err: err.message }, 'server session error');
    };
    try {
      await client.connect(transport, { timeout: CONNECT_TIMEOUT_MS });
      const sdkOnMessage = transport.onmessage;
      transport.onmessage = (message, extra) => {
        if (!opened.takeProgress(message)) sdkOnMessage?.(message, extra);
      };
    } catch (err) {
      await transport.close().catch(() => undefined);
      // B4: a 429 on the session's own requests says nothing about a call: its outcome is unknown.
      throw Object.assign(new Error(`could not start server "${server}": ${(err as Error).message}`), {
        outcomeUnknown: opened.sessionRateLimited,
      });
    }
    this.opts.logger.info({ server, kind }, 'server session open');
    return opened;
  }

  private processSpec(config: StdioServerConfig, kind: ServerKind, server: string, jobId: string) {
    const baseDir = this.opts.config.baseDir;
    const env = resolveEnvRefs(config.env, process.env, `servers.${server}.env`);
    if (kind === 'plugin') {
      return { command: config.command, args: config.args, cwd: baseDir, env: { ...getDefaultEnvironment(), ...env } };
    }
    // A sandbox runs in a folder of its own, so a relative path that names a file beside the config is
    // made absolute first.
    const args = config.args.map((arg) => {
      const candidate = path.resolve(baseDir, arg);
      return !path.isAbsolute(arg) && fs.existsSync(candidate) ? candidate : arg;
    });
    const cwd = path.join(this.opts.sandboxRoot, sandboxId(server, jobId).replace(/[^A-Za-z0-9_.-]/g, '_'));
    fs.mkdirSync(cwd, { recursive: true });
    return { command: config.command, args, cwd, env };
  }

  /** Stops every sandboxed server of a job on this node (its whole process trees). */
  async releaseJob(jobId: string): Promise<number> {
    const ids = this.sandboxesOf(jobId);
    await Promise.all(ids.map((id) => this.stop(id)));
    return ids.length;
  }

  /** Stops the sandboxed server of one job. */
  stopSandbox(server: string, jobId: string): Promise<void> {
    return this.stop(sandboxId(server, jobId));
  }

  /** Whether a job has a sandboxed server running on this node. */
  hasSandbox(jobId: string): boolean {
    return this.sandboxesOf(jobId).length > 0;
  }

  private sandboxesOf(jobId: string): string[] {
    return [...this.owners].filter(([, owner]) => owner === jobId).map(([id]) => id);
  }

  private async stop(id: string): Promise<void> {
    const pending = this.connections.get(id);
    if (!pending) return;
    this.connections.delete(id);
    this.owners.delete(id);
    const connection = await pending.catch(() => undefined);
    await connection?.close();
    if (id.startsWith('sandbox:')) {
      const dir = path.join(this.opts.sandboxRoot, id.replace(/[^A-Za-z0-9_.-]/g, '_'));
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }

  private async reapIdleSandboxes(idleMs: number): Promise<void> {
    const now = Date.now();
    for (const [id, pending] of this.connections) {
      if (!id.startsWith('sandbox:')) continue;
      const connection = await pending.catch(() => undefined);
      if (connection && !connection.busy && now - connection.lastUsed > idleMs) {
        this.opts.logger.info({ sandbox: id }, 'stopping an idle sandboxed server');
        await this.stop(id);
      }
    }
  }

  /** Stops every server this node started, and removes the node's sandbox folder. */
  async close(): Promise<void> {
    clearInterval(this.reaper);
    await Promise.all([...this.connections.keys()].map((id) => this.stop(id)));
    fs.rmSync(this.opts.sandboxRoot, { recursive: true, force: true });
  }
}

/** Pool id of a job's sandboxed server. */
function sandboxId(server: string, jobId: string): string {
  return `sandbox:${server}@${jobId}`;
}
