/**
 * The node's gateway (H3, H4): one MCP server per node, Streamable HTTP on 127.0.0.1, speaking both revisions on one
 * endpoint (mcp/http-server.ts): a 2026-07-28 client's `server/discover` and its per-request calls, whose stream
 * closed is a cancel; an older client's `initialize` and its stateful session, where its `notifications/cancelled`
 * reaches its request. It answers only the bearer token of a harness run that is still running on this node (401
 * otherwise). Each `tools/call` is the job's `callTool` Update; its result is what the workflow answers. A harness's
 * cancel is the `cancelCall` Update; its call's progress is relayed to it (H6), and so is a wait for a person's yes
 * (A7, ./progress).
 */
import { createHash, randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Duplex } from 'node:stream';
import type { Client } from '@temporalio/client';
import { Server } from '@modelcontextprotocol/server';
import type { CallToolRequest, CallToolResult, ServerContext } from '@modelcontextprotocol/server';
import type { LoadedConfig } from '../../common/config';
import type { Logger } from '../../common/logger';
import { McpHttpEndpoint, readJsonBody, replyError, sendResponse, webRequest } from '../../mcp/http-server';
import type { Era } from '../../mcp/http-server';
import { IDEMPOTENCY_KEY_META, MODERN_PROTOCOL } from '../../model/protocol';
import { SessionUpdateError, admitted, offered, sessionCall } from '../../common/session-client';
import { SESSION_TOKEN_PREFIX, jobOfSessionToken, sameDigest, sessionTokenDigest } from '../../common/session-token';
import { closeSessionUpdate, externalSessionQuery, openSessionUpdate } from '../../model/messages';
import type { SessionCallOutput } from '../../model/messages';
import { matchesAny, toolProblem } from '../../model/checks';
import type { CallRelay } from '../call/relay';
import type { PolicyGate } from '../policy/gate';
import type { ServerPool } from '../pool';
import { HarnessProgress } from './progress';
import { currentContext, gatewayCallSpan } from '../observe/gateway';
import type { NodeMetrics } from '../observe/metrics';
import type { Answers } from '../../data';
import { UNKNOWN } from '../observe/metrics';
import { harnessTools, listedTools, toolOfName, toolsDigest } from './tools';

/** A harness run this node serves, as its token says. */
export interface HarnessEntry {
  jobId: string;
  tenant: string;
  session: string;
  sessionRun: number;
  harness: string;
  patterns: readonly string[];
  /** I14: an external session's agent, come with its session token: it may close its session (CLOSE_TOOL). */
  external?: boolean;
}

/**
 * I14: how an external session's agent ends its session with a result, over plain MCP: a tool listed to it alone.
 * Its name is one every model API takes, and no `<server>.<function>` of oz0's reads as it.
 */
export const CLOSE_TOOL = {
  name: 'oz0_close_session',
  description:
    'Ends this oz0 session with its result (any JSON; isError: true for an error result). The job goes on with its next step.',
  inputSchema: {
    type: 'object' as const,
    properties: { result: { description: 'the session’s result' }, isError: { type: 'boolean' } },
  },
};

/** I14: how long a request with an external session's token waits for its job to reach that session. */
const EXTERNAL_WAIT_MS = 20_000;
/** I14: how often an external session's holder asks its job again whether the session is still the one open. */
const EXTERNAL_CHECK_MS = 2_000;

export interface GatewayDeps {
  config: LoadedConfig;
  pool: ServerPool;
  gate: PolicyGate;
  client: Client;
  relay: CallRelay;
  logger: Logger;
  /** O1: the node's series, when it serves them. */
  metrics?: NodeMetrics;
  /** D1, D3: an answer its job keeps in the payload store is read back whole for the agent. */
  answers: Answers;
}

/** One token's run, its MCP endpoint (both revisions) and what it last listed. */
class Holder {
  closed = false;
  listed?: string;
  /**
   * The tools it was last listed, model name → `<server>.<function>` (H3): a call by a model name of the second form
   * is found here, and a call's `tool` label names one of them or says unknown (bounded, O1).
   */
  private tools = new Map<string, string>();
  private toolNames = new Set<string>();
  /** Its listing was read once already for a call it made without listing the tool. */
  readOnce = false;
  /** The id of its token in the gateway's map. */
  tokenId?: string;
  /** O2: the session's trace context, for the calls of a harness that sends no traceparent of its own. */
  readonly trace = currentContext();
  /** I14: when an external session's holder last found its session still open. */
  checkedAt = Date.now();
  /** The MCP revisions its harness has spoken, said once each in the node's log. */
  readonly spoken = new Set<string>();

  constructor(
    readonly entry: HarnessEntry,
    readonly endpoint: (holder: Holder) => McpHttpEndpoint,
  ) {}

  private made?: McpHttpEndpoint;

  remember(tools: Parameters<typeof listedTools>[0]): void {
    this.tools = listedTools(tools);
    this.toolNames = new Set(this.tools.values());
  }

  /** H3: the tool a call names, by its model name or `<server>.<function>`, if it is either. */
  toolOf(name: string): string | undefined {
    return toolOfName(name, this.tools);
  }

  /** Whether its last listing holds this tool (`<server>.<function>`). */
  lists(tool: string): boolean {
    return this.toolNames.has(tool);
  }

  get mcp(): McpHttpEndpoint {
    this.made ??= this.endpoint(this);
    return this.made;
  }

  close(): Promise<void> {
    return this.made?.close() ?? Promise.resolve();
  }
}

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
  /** I14: external sessions' tokens being looked up, by token id: one lookup (and one open) per token at once. */
  private readonly looking = new Map<string, Promise<Holder | undefined>>();

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
    if (holder?.entry.external && !(await this.stillOpen(holder))) holder = undefined;
    if (!holder && bearer?.startsWith(SESSION_TOKEN_PREFIX)) holder = await this.externalHolder(bearer);
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

  /**
   * I14: the holder of an external session's token: its job asked (any node's gateway can), the token's digest held
   * against the one its starter gave the job, and the session opened if it waits (`openSession`, as the Temporal
   * helper does). A token for a session still ahead in its job waits for it, up to {@link EXTERNAL_WAIT_MS}; any
   * other token, a job that does not answer, or a session already ended is undefined (401).
   */
  private externalHolder(token: string): Promise<Holder | undefined> {
    const id = tokenId(token);
    let looking = this.looking.get(id);
    if (!looking) {
      looking = this.lookUp(token)
        .catch((err: unknown) => {
          this.deps.logger.debug({ err: (err as Error).message }, 'gateway: an external session’s token not taken');
          return undefined;
        })
        .finally(() => this.looking.delete(id));
      this.looking.set(id, looking);
    }
    return looking;
  }

  private async lookUp(token: string): Promise<Holder | undefined> {
    const jobId = jobOfSessionToken(token);
    if (!jobId) return undefined;
    const digest = sessionTokenDigest(token);
    const handle = this.deps.client.workflow.getHandle(jobId);
    const until = Date.now() + EXTERNAL_WAIT_MS;
    for (;;) {
      const state = await handle.query(externalSessionQuery);
      const current = state.current;
      if (current?.digest && sameDigest(current.digest, digest)) {
        let { session, run } = current;
        if (!current.open) {
          try {
            ({ session, run } = await offered(() =>
              handle.executeUpdate(openSessionUpdate, { args: [{ client: 'its agent, through a gateway (I14)' }] }),
            ));
          } catch (err) {
            // Another gateway is opening it: asked again in a moment.
            if (!(err instanceof SessionUpdateError) || Date.now() > until) throw err;
            await sleep(200);
            continue;
          }
        }
        const holder = this.hold(token, {
          jobId,
          tenant: state.tenant,
          session,
          sessionRun: run,
          harness: '(external)',
          patterns: ['*'],
          external: true,
        });
        this.deps.logger.info({ jobId, session, sessionRun: run }, 'gateway: an external session’s agent came in');
        return holder;
      }
      if (!state.ahead.some((d) => sameDigest(d, digest)) || Date.now() > until) return undefined;
      await sleep(1000);
    }
  }

  /** I14: whether an external session's holder still holds the session open now (asked again every 2 s at most). */
  private async stillOpen(holder: Holder): Promise<boolean> {
    if (holder.closed) return false;
    if (Date.now() - holder.checkedAt < EXTERNAL_CHECK_MS) return true;
    const { jobId, session, sessionRun } = holder.entry;
    const state = await this.deps.client.workflow
      .getHandle(jobId)
      .query(externalSessionQuery)
      .catch(() => undefined);
    const c = state?.current;
    if (c?.open && c.session === session && c.run === sessionRun) {
      holder.checkedAt = Date.now();
      return true;
    }
    void this.release(holder);
    return false;
  }

  /** A holder of `token`'s run, served until it is released. */
  private hold(token: string, entry: HarnessEntry): Holder {
    const holder = new Holder(
      entry,
      (h) =>
        new McpHttpEndpoint(
          (era) => this.serverFor(h, era),
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

  /** I14: an external session's agent ends its session with a result. */
  private async closeExternal(holder: Holder, args: Record<string, unknown>): Promise<CallToolResult> {
    const { jobId, session, sessionRun } = holder.entry;
    try {
      await offered(() =>
        this.deps.client.workflow.getHandle(jobId).executeUpdate(closeSessionUpdate, {
          args: [
            { session, run: sessionRun, result: args.result ?? null, ...(args.isError === true && { isError: true }) },
          ],
        }),
      );
    } catch (err) {
      return errorResult(`oz0: session ${session} could not be closed: ${(err as Error).message}`);
    }
    // After this answer went out: the session's token answers 401 from now on.
    setImmediate(() => void this.release(holder));
    return { content: [{ type: 'text', text: `session ${session} of job ${jobId} closed` }] };
  }

  /** The gateway's MCP server for one token's run: for one 2026-07-28 request, or for one legacy session. */
  private serverFor(holder: Holder, era: Era): Server {
    const server = new Server(
      { name: 'oz0-gateway', version: '0.1.0' },
      {
        capabilities: { tools: { listChanged: true } },
        instructions: `oz0 job ${holder.entry.jobId}, session ${holder.entry.session}: each call is made durably by oz0`,
      },
    );
    // Which revision the harness speaks: said once in the node's log (the client's name with it, as it gave it).
    const heard = () =>
      this.spoke(
        holder,
        server.getNegotiatedProtocolVersion() ?? (era === 'modern' ? MODERN_PROTOCOL : undefined),
        server.getClientVersion()?.name,
      );
    server.setRequestHandler('tools/list', async () => {
      heard();
      const tools = await harnessTools(holder.entry, this.deps);
      holder.listed = toolsDigest(tools);
      holder.remember(tools);
      return { tools: holder.entry.external ? [...tools, CLOSE_TOOL] : tools };
    });
    server.setRequestHandler('tools/call', (request, ctx) => {
      heard();
      if (holder.entry.external && request.params.name === CLOSE_TOOL.name)
        return this.closeExternal(holder, request.params.arguments ?? {});
      return this.call(holder, request, ctx, era);
    });
    return server;
  }

  /** Says in the node's log, once per revision, which MCP revision a session's harness speaks with the gateway. */
  private spoke(holder: Holder, protocol: string | undefined, client: string | undefined): void {
    if (!protocol || holder.spoken.has(protocol)) return;
    holder.spoken.add(protocol);
    const { jobId, session, sessionRun, harness } = holder.entry;
    this.deps.logger.info({ jobId, session, sessionRun, harness, protocol, client }, 'gateway: the harness speaks MCP');
  }

  /** H4: one call of the harness, made by its job's workflow; H5, H6: its cancel and its progress. */
  private async call(holder: Holder, request: CallToolRequest, ctx: ServerContext, era: Era): Promise<CallToolResult> {
    const { entry } = holder;
    // H3: by its model name or `<server>.<function>`; the span, the label and the job name it the second way.
    const tool = await this.toolOf(holder, request.params.name);
    const span = gatewayCallSpan({
      tool: tool ?? request.params.name,
      meta: request.params._meta,
      session: holder.trace,
      requestId: ctx.mcpReq.id,
      sessionId: ctx.sessionId,
      protocol: era === 'modern' ? MODERN_PROTOCOL : undefined,
      attributes: { job: entry.jobId, tenant: entry.tenant },
    });
    const label = await this.toolLabel(holder, tool);
    let outcome = 'failed';
    try {
      const result = await span.within(() => this.callInSpan(holder, tool, request, ctx, era));
      outcome = result.isError ? 'error' : 'ok';
      span.end(result);
      return result;
    } catch (err) {
      outcome = ctx.mcpReq.signal.aborted ? 'cancelled' : 'failed';
      span.end(undefined, err);
      throw err;
    } finally {
      this.deps.metrics?.gatewayCall(label, entry.tenant, outcome);
    }
  }

  /**
   * H3: the tool a call names. A model name of the second form is looked up in the harness's last listing, read now
   * (once per run) if it called before listing it.
   */
  private async toolOf(holder: Holder, name: string): Promise<string | undefined> {
    const tool = holder.toolOf(name);
    if (tool || holder.readOnce) return tool;
    await this.readListing(holder);
    return holder.toolOf(name);
  }

  /**
   * O1: a call's `tool` label is the tool when the harness's listing has it (read now, once, if it called before
   * listing), else `(unknown)`: a harness cannot grow the node's series with names of its own making.
   */
  private async toolLabel(holder: Holder, tool: string | undefined): Promise<string> {
    if (!this.deps.metrics || !tool) return UNKNOWN;
    if (!holder.lists(tool) && !holder.readOnce) await this.readListing(holder);
    return holder.lists(tool) ? tool : UNKNOWN;
  }

  private async readListing(holder: Holder): Promise<void> {
    holder.readOnce = true;
    const tools = await harnessTools(holder.entry, this.deps).catch(() => undefined);
    if (tools) holder.remember(tools);
  }

  private async callInSpan(
    holder: Holder,
    tool: string | undefined,
    request: CallToolRequest,
    ctx: ServerContext,
    era: Era,
  ): Promise<CallToolResult> {
    const { entry } = holder;
    if (!tool || toolProblem(tool) || !matchesAny(entry.patterns, tool)) {
      const name = request.params.name;
      return errorResult(`oz0: ${name} is not one of this harness's tools (${entry.patterns.join(', ')})`);
    }
    const callId = randomUUID();
    const progressToken = request.params._meta?.progressToken;
    const progress =
      progressToken === undefined
        ? undefined
        : new HarnessProgress((params) => {
            const notification = { method: 'notifications/progress' as const, params: { progressToken, ...params } };
            ctx.mcpReq.notify(notification).catch(() => undefined);
          }, this.deps.config.node.waitingNoticeMs);
    // H4 (issue 26.3): the answer, once durable, comes through the relay before the Update's own.
    let answered!: (out: SessionCallOutput) => void;
    const durable = new Promise<SessionCallOutput>((resolve) => (answered = resolve));
    const unwatch = this.deps.relay.watch(entry.jobId, callId, {
      progress: (p) => progress?.progress(p),
      waiting: (words) => progress?.waiting(words),
      answered,
    });
    const where = { client: this.deps.client, jobId: entry.jobId, session: entry.session, run: entry.sessionRun };
    const { signal } = ctx.mcpReq;
    const onCancel = () => {
      // A legacy harness's notifications/cancelled carries its words; a 2026-07-28 harness closes the call's stream.
      const reason =
        typeof signal.reason === 'string'
          ? signal.reason
          : era === 'modern'
            ? 'the harness closed the call’s stream'
            : 'the harness closed its connection';
      sessionCall(where)
        .cancel(callId, reason)
        .catch((err: unknown) => this.deps.logger.warn({ err: (err as Error).message }, 'gateway: cancel failed'));
    };
    signal.addEventListener('abort', onCancel, { once: true });
    try {
      // The Update keeps its place among the job's in-flight ones until it completes, after the answer went out.
      const update = admitted(
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
      let early = false;
      update.catch((err: unknown) => {
        if (early)
          this.deps.logger.warn(
            { err: (err as Error).message, jobId: entry.jobId },
            'gateway: a call’s Update failed after its answer',
          );
      });
      const out = await Promise.race([update, durable.then((o) => ((early = true), o))]);
      this.deps.logger.debug({ jobId: entry.jobId, callId, early }, 'gateway: a call answered');
      // D1: an answer its step keeps as a claim (one that came through the Update) is read whole from the store.
      const result = await this.deps.answers.read(out.result, entry);
      const meta = { ...(result._meta ?? {}), ...(out.key ? { [IDEMPOTENCY_KEY_META]: out.key } : {}) };
      return { ...result, content: result.content as CallToolResult['content'], _meta: meta };
    } catch (err) {
      // The SDK sends nothing for a request its client cancelled; any other failure is the call's error result.
      if (signal.aborted) throw err;
      return errorResult(`oz0: ${(err as Error).message}`);
    } finally {
      unwatch();
      progress?.close();
      signal.removeEventListener('abort', onCancel);
      // A cancelled call has stopped (or answered anyway): the SDK sends a cancelled request nothing, so a legacy
      // harness's response for it is ended now, not when the harness ends its session (issue 26.6); a 2026-07-28
      // harness's cancel closed its own. After this handler has settled, so nothing is written after the end.
      if (signal.aborted && era === 'legacy') setImmediate(() => holder.mcp.endRequest(ctx.sessionId, ctx.mcpReq.id));
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
          holder.remember(tools);
          holder.mcp.toolsChanged();
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
