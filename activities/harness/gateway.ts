/**
 * The node's gateway (H3, H4): one MCP server per node, Streamable HTTP on 127.0.0.1, speaking both revisions on one
 * endpoint (mcp/http-server.ts): a 2026-07-28 client's `server/discover` and its per-request calls, whose stream
 * closed is a cancel; an older client's `initialize` and its stateful session, where its `notifications/cancelled`
 * reaches its request. It answers only the bearer token of a harness run that is still running on this node (401
 * otherwise). Each `tools/call` is the job's `callTool` Update; its result is what the workflow answers. A harness's
 * cancel is the `cancelCall` Update; its call's progress is relayed to it (H6), and so is a wait for a person's yes
 * (A7, ./progress).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import { McpHttpEndpoint, readJsonBody, replyError, sendResponse, webRequest } from '../../mcp/http-server';
import { SESSION_TOKEN_PREFIX } from '../../common/session-token';
import { harnessTools, toolsDigest } from './tools';
import { ExternalSessions } from './external-sessions';
import { GatewayMcp } from './gateway-mcp';
import type { GatewayDeps } from './gateway-mcp';
import { Holder, tokenId } from './holder';
import type { HarnessEntry } from './holder';

export { CLOSE_TOOL } from './gateway-mcp';
export type { GatewayDeps } from './gateway-mcp';
export type { HarnessEntry } from './holder';

export class Gateway {
  private readonly holders = new Map<string, Holder>();
  private readonly http: http.Server;
  private readonly unlisten: () => void;
  url = '';
  /** Its port on 127.0.0.1: a sandboxed harness reaches it at the same address inside (I3). */
  port = 0;
  private posts = 0;
  /** I10: requests in flight, by token. */
  private readonly inFlight = new Map<string, number>();
  /** The MCP servers its harness runs talk to. */
  private readonly surface: GatewayMcp;
  /** I14: external sessions' tokens, looked up in their jobs. */
  private readonly external: ExternalSessions;

  /** POSTs whose response has not ended yet: calls running, or held for nothing (issue 26.6). */
  get openPosts(): number {
    return this.posts;
  }

  private constructor(private readonly deps: GatewayDeps) {
    const { node } = deps.config;
    // I10: a request arrives whole (headers and body) within gatewayRequestSeconds, or gets 408 and its connection
    // closed; checked every second rather than Node's default 30 s.
    const arrival = node.gatewayRequestSeconds * 1000;
    const options = { requestTimeout: arrival, headersTimeout: arrival, connectionsCheckingInterval: 1000 };
    this.http = http.createServer(options, (req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        deps.logger.warn({ err: (err as Error).message }, 'gateway: request failed');
        replyError(res, 500, -32603, 'internal error');
      });
    });
    // I10: connections to the TCP port at once (an unisolated harness's, the node's own); past it Node closes them.
    this.http.maxConnections = node.gatewayMaxConnections;
    // H3: a change of the tenant's policy or kill switches may change what a harness sees.
    this.unlisten = deps.gate.onChange((tenant) => this.policyChanged(tenant));
    this.surface = new GatewayMcp(deps, (holder) => this.release(holder));
    this.external = new ExternalSessions({
      client: deps.client,
      logger: deps.logger,
      hold: (token, entry) => this.hold(token, entry),
      release: (holder) => this.release(holder),
    });
  }

  /**
   * Starts the node's gateway on `node.gatewayHost` (127.0.0.1 unless an operator lets external sessions' agents
   * reach it from elsewhere, I14) and `node.gatewayPort` (0: a free port).
   */
  static async start(deps: GatewayDeps): Promise<Gateway> {
    const gateway = new Gateway(deps);
    const host = deps.config.node.gatewayHost;
    await new Promise<void>((resolve, reject) => {
      gateway.http.once('error', reject);
      gateway.http.listen(deps.config.node.gatewayPort, host, () => resolve());
    });
    gateway.port = (gateway.http.address() as AddressInfo).port;
    gateway.url = `http://127.0.0.1:${gateway.port}/mcp`;
    return gateway;
  }

  /** Serves a connection that came another way: a sandboxed harness's, through its Unix socket (I3). */
  accept(socket: Duplex): void {
    this.http.emit('connection', socket);
  }

  /** Lets a harness run in with `token` until the result's `close()`: then the token answers 401. */
  open(token: string, entry: HarnessEntry): { close(): Promise<void> } {
    const holder = this.hold(token, entry);
    return { close: () => this.release(holder) };
  }

  async close(): Promise<void> {
    this.unlisten();
    const holders = [...this.holders.values()];
    for (const holder of holders) holder.closed = true;
    this.holders.clear();
    await Promise.allSettled(holders.map((h) => h.close()));
    await new Promise<void>((resolve) => {
      this.http.close(() => resolve());
      this.http.closeAllConnections();
    });
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    if (new URL(req.url ?? '/', 'http://localhost').pathname !== '/mcp')
      return replyError(res, 404, -32601, 'use /mcp');
    const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
    let holder = bearer ? this.holders.get(tokenId(bearer)) : undefined;
    if (holder?.entry.external && !(await this.external.stillOpen(holder))) holder = undefined;
    if (!holder && bearer?.startsWith(SESSION_TOKEN_PREFIX)) holder = await this.external.externalHolder(bearer);
    if (!holder || holder.closed) {
      res.setHeader('WWW-Authenticate', 'Bearer');
      return replyError(res, 401, -32001, 'unauthorized: OZ0_MCP_TOKEN of a running session');
    }
    if (req.method !== 'POST' && req.method !== 'GET' && req.method !== 'DELETE') {
      res.setHeader('Allow', 'GET, POST, DELETE');
      return replyError(res, 405, -32000, `method ${req.method} not allowed`);
    }
    // I10: a token's requests in flight are bounded: past it, 429 (the others of its run go on).
    const id = tokenId(bearer!);
    const flying = this.inFlight.get(id) ?? 0;
    const { gatewayRequestsPerToken, gatewayMaxBodyBytes } = this.deps.config.node;
    if (flying >= gatewayRequestsPerToken) {
      res.setHeader('Retry-After', '1');
      return replyError(res, 429, -32000, `too many requests in flight for this session (${gatewayRequestsPerToken})`);
    }
    this.inFlight.set(id, flying + 1);
    res.once('close', () => {
      const left = (this.inFlight.get(id) ?? 1) - 1;
      if (left > 0) this.inFlight.set(id, left);
      else this.inFlight.delete(id);
    });
    if (req.method === 'POST') {
      this.posts++;
      res.once('close', () => this.posts--);
    }
    const body = req.method === 'POST' ? await readJsonBody(req, res, gatewayMaxBodyBytes) : undefined;
    if (req.method === 'POST' && !body) return;
    await sendResponse(res, await holder.mcp.serve(webRequest(req, res, body?.raw), body?.value));
  }

  /** A holder of `token`'s run, served until it is released. */
  private hold(token: string, entry: HarnessEntry): Holder {
    const holder = new Holder(
      entry,
      (h) =>
        new McpHttpEndpoint(
          (era) => this.surface.serverFor(h, era),
          (err) => this.deps.logger.debug({ err: err.message }, 'gateway: a request refused'),
          // I10: its 2025-11-25 sessions, each a server of its own.
          this.deps.config.node.gatewayLegacySessions,
        ),
    );
    holder.tokenId = tokenId(token);
    this.holders.set(holder.tokenId, holder);
    return holder;
  }

  /** Lets a holder go: its token answers 401 (an external one is looked up again at its next request). */
  private release(holder: Holder): Promise<void> {
    holder.closed = true;
    if (holder.tokenId && this.holders.get(holder.tokenId) === holder) this.holders.delete(holder.tokenId);
    return holder.close();
  }

  /** Sends `notifications/tools/list_changed` to the runs of this tenant whose tools changed. */
  private policyChanged(tenant: string): void {
    for (const holder of this.holders.values()) {
      if (holder.closed || holder.listed === undefined || (tenant !== '*' && holder.entry.tenant !== tenant)) continue;
      harnessTools(holder.entry, this.deps)
        .then((tools) => {
          const digest = toolsDigest(tools);
          if (digest === holder.listed || holder.closed) return;
          holder.listed = digest;
          holder.remember(tools);
          holder.mcp.toolsChanged();
        })
        .catch(() => undefined);
    }
  }
}
