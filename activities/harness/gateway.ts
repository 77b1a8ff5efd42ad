/**
 * The node's gateway (H3, H4): one MCP server per node, Streamable HTTP on 127.0.0.1, with stateful sessions (so a
 * harness's `notifications/cancelled` reaches its request). It answers only the bearer token of a harness run that
 * is still running on this node (401 otherwise). Each `tools/call` is the job's `callTool` Update; its result is what
 * the workflow answers. A harness's cancel is the `cancelCall` Update; its call's progress is relayed to it (H6), and
 * so is a wait for a person's yes (A7, ./progress).
 */
import { createHash, randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Client } from '@temporalio/client';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { CallToolRequestSchema, ListToolsRequestSchema, isInitializeRequest } from '@modelcontextprotocol/sdk/types.js';
import type { CallToolRequest, CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { RequestHandlerExtra } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { ServerNotification, ServerRequest } from '@modelcontextprotocol/sdk/types.js';
import type { LoadedConfig } from '../../common/config';
import type { Logger } from '../../common/logger';
import { IDEMPOTENCY_KEY_META } from '../../common/protocol';
import { admitted, sessionCall } from '../../common/session-client';
import { matchesAny, toolProblem } from '../../workflows/checks';
import type { CallRelay } from '../call/relay';
import type { PolicyGate } from '../policy/gate';
import type { ServerPool } from '../servers/pool';
import { HarnessProgress } from './progress';
import { harnessTools, toolsDigest } from './tools';

/** A gateway request body larger than this is refused (413): a call's arguments must fit Temporal's history. */
export const MAX_GATEWAY_BODY = 2 * 1024 * 1024;

/** A harness run this node serves, as its token says. */
export interface HarnessEntry {
  jobId: string;
  tenant: string;
  session: string;
  sessionRun: number;
  harness: string;
  patterns: readonly string[];
}

export interface GatewayDeps {
  config: LoadedConfig;
  pool: ServerPool;
  gate: PolicyGate;
  client: Client;
  relay: CallRelay;
  logger: Logger;
}

/** One token's run, its MCP sessions and what it last listed. */
class Holder {
  readonly sessions = new Map<string, { transport: StreamableHTTPServerTransport; server: Server }>();
  closed = false;
  listed?: string;

  constructor(readonly entry: HarnessEntry) {}
}

type Extra = RequestHandlerExtra<ServerRequest, ServerNotification>;

export class Gateway {
  private readonly holders = new Map<string, Holder>();
  private readonly http: http.Server;
  private readonly unlisten: () => void;
  url = '';
  /** Its port on 127.0.0.1: a sandboxed harness reaches it at the same address inside (I3). */
  port = 0;

  private constructor(private readonly deps: GatewayDeps) {
    this.http = http.createServer((req, res) => {
      this.handle(req, res).catch((err: unknown) => {
        deps.logger.warn({ err: (err as Error).message }, 'gateway: request failed');
        reply(res, 500, -32603, 'internal error');
      });
    });
    // H3: a change of the tenant's policy or kill switches may change what a harness sees.
    this.unlisten = deps.gate.onChange((tenant) => this.policyChanged(tenant));
  }

  /** Starts the node's gateway on 127.0.0.1 (`node.gatewayPort`, 0: a free port). */
  static async start(deps: GatewayDeps): Promise<Gateway> {
    const gateway = new Gateway(deps);
    await new Promise<void>((resolve, reject) => {
      gateway.http.once('error', reject);
      gateway.http.listen(deps.config.node.gatewayPort, '127.0.0.1', () => resolve());
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
    const id = tokenId(token);
    const holder = new Holder(entry);
    this.holders.set(id, holder);
    return {
      close: async () => {
        holder.closed = true;
        if (this.holders.get(id) === holder) this.holders.delete(id);
        await Promise.allSettled([...holder.sessions.values()].map((s) => s.transport.close()));
      },
    };
  }

  async close(): Promise<void> {
    this.unlisten();
    for (const holder of this.holders.values()) holder.closed = true;
    const transports = [...this.holders.values()].flatMap((h) => [...h.sessions.values()].map((s) => s.transport));
    this.holders.clear();
    await Promise.allSettled(transports.map((t) => t.close()));
    await new Promise<void>((resolve) => {
      this.http.close(() => resolve());
      this.http.closeAllConnections();
    });
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    if (new URL(req.url ?? '/', 'http://localhost').pathname !== '/mcp') return reply(res, 404, -32601, 'use /mcp');
    const bearer = /^Bearer\s+(\S+)$/i.exec(req.headers.authorization ?? '')?.[1];
    const holder = bearer ? this.holders.get(tokenId(bearer)) : undefined;
    if (!holder || holder.closed) {
      res.setHeader('WWW-Authenticate', 'Bearer');
      return reply(res, 401, -32001, 'unauthorized: OZ0_MCP_TOKEN of a running session');
    }
    if (req.method !== 'POST' && req.method !== 'GET' && req.method !== 'DELETE') {
      res.setHeader('Allow', 'GET, POST, DELETE');
      return reply(res, 405, -32000, `method ${req.method} not allowed`);
    }
    const sessionId = req.headers['mcp-session-id'];
    const body = req.method === 'POST' ? await readBody(req, res) : undefined;
    if (req.method === 'POST' && !body) return;
    if (typeof sessionId === 'string') {
      const session = holder.sessions.get(sessionId);
      // 404 tells a client its session is gone; another token's session id is as good as unknown here.
      if (!session) return reply(res, 404, -32001, 'session not found');
      return session.transport.handleRequest(req, res, body?.value);
    }
    if (req.method !== 'POST' || !isInitializeRequest(body?.value)) {
      return reply(res, 400, -32000, 'a request without mcp-session-id must be an initialize POST');
    }
    const server = this.serverFor(holder);
    const transport: StreamableHTTPServerTransport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        holder.sessions.set(id, { transport, server });
      },
    });
    transport.onclose = () => {
      if (transport.sessionId !== undefined) holder.sessions.delete(transport.sessionId);
    };
    await server.connect(transport);
    await transport.handleRequest(req, res, body!.value);
  }

  private serverFor(holder: Holder): Server {
    const server = new Server(
      { name: 'oz0-gateway', version: '0.1.0' },
      {
        capabilities: { tools: { listChanged: true } },
        instructions: `oz0 job ${holder.entry.jobId}, session ${holder.entry.session}: each call is made durably by oz0`,
      },
    );
    server.setRequestHandler(ListToolsRequestSchema, async () => {
      const tools = await harnessTools(holder.entry, this.deps);
      holder.listed = toolsDigest(tools);
      return { tools };
    });
    server.setRequestHandler(CallToolRequestSchema, (request, extra) => this.call(holder, request, extra));
    return server;
  }

  /** H4: one call of the harness, made by its job's workflow; H5, H6: its cancel and its progress. */
  private async call(holder: Holder, request: CallToolRequest, extra: Extra): Promise<CallToolResult> {
    const { entry } = holder;
    const tool = request.params.name;
    if (toolProblem(tool) || !matchesAny(entry.patterns, tool)) {
      return errorResult(`oz0: ${tool} is not one of this harness's tools (${entry.patterns.join(', ')})`);
    }
    const callId = randomUUID();
    const progressToken = request.params._meta?.progressToken;
    const progress =
      progressToken === undefined
        ? undefined
        : new HarnessProgress((params) => {
            const notification = { method: 'notifications/progress' as const, params: { progressToken, ...params } };
            extra.sendNotification(notification).catch(() => undefined);
          }, this.deps.config.node.waitingNoticeMs);
    const unwatch = progress ? this.deps.relay.watch(entry.jobId, callId, progress) : undefined;
    const where = { client: this.deps.client, jobId: entry.jobId, session: entry.session, run: entry.sessionRun };
    const onCancel = () => {
      // A harness's notifications/cancelled carries its words; an abort without them is its connection closing.
      const reason =
        typeof extra.signal.reason === 'string' ? extra.signal.reason : 'the harness closed its connection';
      sessionCall(where)
        .cancel(callId, reason)
        .catch((err: unknown) => this.deps.logger.warn({ err: (err as Error).message }, 'gateway: cancel failed'));
    };
    extra.signal.addEventListener('abort', onCancel, { once: true });
    try {
      const out = await admitted(
        entry.jobId,
        () =>
          sessionCall(where).call({
            callId,
            tool,
            args: request.params.arguments ?? {},
            progress: progressToken !== undefined,
          }),
        this.deps.config.node.gatewayCallsPerJob,
      );
      const meta = { ...(out.result._meta ?? {}), ...(out.key ? { [IDEMPOTENCY_KEY_META]: out.key } : {}) };
      return { ...out.result, content: out.result.content as CallToolResult['content'], _meta: meta };
    } catch (err) {
      // The SDK sends nothing for a request its client cancelled; any other failure is the call's error result.
      if (extra.signal.aborted) throw err;
      return errorResult(`oz0: ${(err as Error).message}`);
    } finally {
      unwatch?.();
      progress?.close();
      extra.signal.removeEventListener('abort', onCancel);
    }
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
          for (const { server } of holder.sessions.values()) server.sendToolListChanged().catch(() => undefined);
        })
        .catch(() => undefined);
    }
  }
}

/** Tokens are looked up by their hash: a map keyed by the token itself would time its lookups by the token. */
function tokenId(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

function errorResult(text: string): CallToolResult {
  return { isError: true, content: [{ type: 'text', text }] };
}

function reply(res: http.ServerResponse, status: number, code: number, message: string): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

/**
 * The lingering close of HTTP servers: after a 413, what the client still sends is read and dropped (Node's server
 * does so for a request it answered, the connection kept) — up to a bound, for a while, then it is cut — so a client
 * still sending reads the 413 rather than a reset, also through a sandbox's forwarder, whose write to a closed socket
 * would lose the answer waiting behind it.
 */
function discardRest(req: http.IncomingMessage): void {
  let dropped = 0;
  const cut = setTimeout(() => req.destroy(), 5000);
  req.on('data', (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > 4 * MAX_GATEWAY_BODY) req.destroy();
  });
  req.once('close', () => clearTimeout(cut));
}

/** Reads and parses a JSON body; undefined, with the reply sent, when it is too large (413) or not JSON (400). */
function readBody(req: http.IncomingMessage, res: http.ServerResponse): Promise<{ value: unknown } | undefined> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (chunk: Buffer) => {
      if (over) return;
      size += chunk.length;
      if (size <= MAX_GATEWAY_BODY) return void chunks.push(chunk);
      over = true;
      chunks.length = 0;
      reply(res, 413, -32000, `request body over ${MAX_GATEWAY_BODY} bytes`);
      discardRest(req);
      resolve(undefined);
    });
    req.once('end', () => {
      if (over) return;
      try {
        resolve({ value: JSON.parse(Buffer.concat(chunks).toString('utf8')) });
      } catch {
        reply(res, 400, -32700, 'parse error: the body is not JSON');
        resolve(undefined);
      }
    });
    // A client gone mid-body: nothing to answer.
    req.once('error', () => resolve(undefined));
  });
}
