/**
 * The gateway's MCP surface (H3-H6): the server a harness's run talks to, for one 2026-07-28 request or one legacy
 * session, and its handlers — `tools/list`, the tools its patterns and its tenant's policy let it see; `tools/call`,
 * each the job's `callTool` Update, cancelled by `cancelCall`, its progress and a wait for a person's yes relayed back;
 * and an external session's CLOSE_TOOL (I14).
 */
import { randomUUID } from 'node:crypto';
import type { Client } from '@temporalio/client';
import { Server } from '@modelcontextprotocol/server';
import type { CallToolRequest, CallToolResult, ServerContext } from '@modelcontextprotocol/server';
import type { LoadedConfig } from '../../common/config';
import type { Logger } from '../../common/logger';
import type { Era } from '../../mcp/http-server';
import { IDEMPOTENCY_KEY_META, MODERN_PROTOCOL } from '../../model/protocol';
import { admitted, offered, sessionCall } from '../../common/session-client';
import { closeSessionUpdate } from '../../model/messages';
import type { SessionCallOutput } from '../../model/messages';
import { matchesAny, toolProblem } from '../../model/checks';
import type { CallRelay } from '../call/relay';
import type { PolicyGate } from '../policy/gate';
import type { ServerPool } from '../pool';
import { HarnessProgress } from './progress';
import { gatewayCallSpan } from '../observe/gateway';
import type { NodeMetrics } from '../observe/metrics';
import type { Answers } from '../../data';
import { UNKNOWN } from '../observe/metrics';
import { harnessTools, toolsDigest } from './tools';
import type { Holder } from './holder';

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

/** The MCP servers of a gateway's harness runs, and what their tools do. */
export class GatewayMcp {
  constructor(
    private readonly deps: GatewayDeps,
    /** Lets a holder go: its token answers 401 (the gateway's holders). */
    private readonly release: (holder: Holder) => Promise<void>,
  ) {}

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
  serverFor(holder: Holder, era: Era): Server {
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
}

function errorResult(text: string): CallToolResult {
  return { isError: true, content: [{ type: 'text', text }] };
}
