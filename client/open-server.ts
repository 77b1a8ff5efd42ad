/**
 * A server of the config opened as a node opens it, through a short-lived pool of its own: what `oz0 plugin test`
 * hands the drill (plugin/drill/plugin-test.ts), which talks MCP to it and needs nothing else of the node.
 */
import os from 'node:os';
import path from 'node:path';
import type { ClientCapabilities, Tool } from '@modelcontextprotocol/client';
import { ServerPool } from '../activities/pool';
import type { Lease } from '../activities/pool';
import { describeBwrap } from '../activities/sandbox';
import { perTenant } from '../common/config';
import type { LoadedConfig, ServerKind } from '../common/config';
import { createLogger } from '../common/logger';
import { ProcessTransport } from '../mcp';
import type { CredentialReport, ServerConnection } from '../mcp';
import type { OpenedServer } from '../plugin/drill/plugin-test';

/**
 * Opens `server` of the config as a node would (`oz0 plugin test`'s way in); a per-tenant server with `tenant`'s own
 * credentials (R1), as that tenant's calls reach it.
 */
export function openServer(config: LoadedConfig, server: string, tenant?: string): OpenedServer {
  return new PooledServer(config, server, tenant);
}

class PooledServer implements OpenedServer {
  private pool: ServerPool;
  private lease?: Lease;
  readonly kind: ServerKind;
  /** A job of its own (the tenant's, when one is given), so a sandboxed server is this command's and no job's. */
  private get owner() {
    return { tenant: this.tenant ?? 'oz0', jobId: `oz0-plugin-test-${process.pid}` };
  }

  constructor(
    private readonly config: LoadedConfig,
    readonly server: string,
    private readonly tenant?: string,
  ) {
    if (!Object.hasOwn(config.servers, server)) throw new Error(`the config has no server named "${server}"`);
    this.pool = this.newPool();
    this.kind = this.pool.kindOf(config.servers[server]);
  }

  private newPool(): ServerPool {
    return new ServerPool({
      config: this.config,
      // What the pool would warn about (a server that could not start, with its last words) is in the test's own
      // findings; its JSON line would only say it twice. OZ0_LOG_LEVEL shows the pool's log when wanted.
      logger: createLogger({ level: process.env.OZ0_LOG_LEVEL ?? 'error' }),
      sandboxRoot: path.join(os.tmpdir(), `oz0-plugin-test-${process.pid}`),
      killGraceMs: this.config.node.killGraceSeconds * 1000,
      // The operator's own tool: a server's failure quotes what it said.
      quoteSharedStderr: true,
    });
  }

  isolation(): string | undefined {
    if (this.kind !== 'sandbox') return undefined;
    const status = this.pool.isolation.check();
    if (status.mode === 'none')
      return 'none: runs unisolated, with the node\'s files, network and processes in reach (node.isolation: "none")';
    if (status.problem) return `refused: ${status.problem}`;
    return `${describeBwrap(status.bwrap!)}, limits by ${status.limits!.kind}${status.limits!.gaps.length ? ` (${status.limits!.gaps.join('; ')})` : ''}`;
  }

  async connection(): Promise<ServerConnection> {
    if (!this.lease || this.lease.connection.closed) {
      this.lease?.release();
      this.lease = await this.pool.acquire(this.server, this.owner);
    }
    return this.lease.connection;
  }

  listingFor(server: string, capabilities: ClientCapabilities): Promise<Tool[]> {
    return this.pool.listingFor(server, capabilities, this.tenant);
  }

  credential(): CredentialReport | undefined {
    const config = this.config.servers[this.server];
    if (!this.tenant || !perTenant(config)) return undefined;
    return this.pool.credentials.of(this.server, this.tenant).describe();
  }

  async afterCancel(): Promise<void> {
    // C3: oz0 stops a sandboxed server after a cancel; its next attempt gets a fresh one.
    if (this.kind !== 'sandbox') return;
    this.lease?.release();
    this.lease = undefined;
    await this.pool.stopSandbox(this.server, this.owner);
  }

  get restart(): (() => Promise<void>) | undefined {
    if (this.kind === 'remote') return undefined;
    return async () => {
      const transport = this.lease?.connection.client.transport;
      // SIGKILL, as when a node is lost: a store that flushes on exit gets no chance to.
      if (transport instanceof ProcessTransport && transport.pid) {
        try {
          process.kill(-transport.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      await this.close();
      this.pool = this.newPool();
      await this.connection();
    };
  }

  async close(): Promise<void> {
    this.lease?.release();
    this.lease = undefined;
    await this.pool.close();
  }
}
