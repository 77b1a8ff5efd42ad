/**
 * What one attempt tells observability (O1-O3): its series when it ends, its attributes on the attempt's span
 * (`RunActivity:callTool`, made by Temporal's activity interceptor), and the MCP `tools/call` client span, whose
 * context goes to the server in `params._meta` (`traceparent`, `tracestate`: MCP SEP-414).
 *
 * With no OpenTelemetry SDK installed (no `OTEL_EXPORTER_OTLP_*`), the API's tracer is a no-op: the spans cost a
 * call each and nothing goes in `_meta`; with no metrics port, `metrics` is undefined.
 */
import { SpanKind, SpanStatusCode, context, propagation, trace } from '@opentelemetry/api';
import type { Span } from '@opentelemetry/api';
import type { CallToolResult } from '@modelcontextprotocol/client';
import { busyOf } from '../../model/protocol';
import type { Outcome } from '../../model/schemas';
import type { CallInput } from '../../model/activities';
import { SpanAttr } from '../../model/spans';
import type { ServerConnection } from '../../mcp';
import { callLabels } from './metrics';
import type { NodeMetrics } from './metrics';
import type { NodeRelease } from '../../common/release';

export const TRACER_NAME = 'oz0';
const tracer = () => trace.getTracer(TRACER_NAME);

/** The MCP conventions' attribute names (OpenTelemetry semantic-conventions-genai, gen-ai/mcp.md). */
export const McpAttr = {
  method: 'mcp.method.name',
  sessionId: 'mcp.session.id',
  protocolVersion: 'mcp.protocol.version',
  requestId: 'jsonrpc.request.id',
  transport: 'network.transport',
  errorType: 'error.type',
  statusCode: 'rpc.response.status_code',
} as const;

/** The conventions' `error.type` for an answer with `isError: true` (a busy answer is one too). */
export const TOOL_ERROR = 'tool_error';

/** stdio is a pipe, Streamable HTTP runs over TCP. */
function transportOf(connection: ServerConnection): string {
  return connection.kind === 'remote' ? 'tcp' : 'pipe';
}

/** One attempt's observation: made when it starts, told its stops and its end. */
export class AttemptWatch {
  private readonly startedAt = performance.now();
  private stoppedAt?: number;
  private stoppedDone?: number;
  private known = { server: false, fn: false };
  private readonly span = trace.getActiveSpan();
  private readonly release?: () => void;

  constructor(
    private readonly metrics: NodeMetrics | undefined,
    private readonly input: CallInput,
    private readonly attempt: number,
    nodeRelease?: NodeRelease,
  ) {
    this.release = metrics?.attemptStarted();
    this.span?.setAttributes({
      ...(nodeRelease && { [SpanAttr.release]: nodeRelease.name, [SpanAttr.buildId]: nodeRelease.buildId }),
      [SpanAttr.job]: input.jobId,
      [SpanAttr.tenant]: input.tenant,
      [SpanAttr.tool]: input.tool,
      [SpanAttr.key]: input.key,
      [SpanAttr.attempt]: attempt,
      [SpanAttr.genAiToolName]: input.tool.slice(input.tool.indexOf('.') + 1),
      [SpanAttr.genAiOperation]: 'execute_tool',
      ...approvalAttributes(input),
    });
  }

  /** F1: the attempt was scheduled at this time (ms since the epoch) and starts now. */
  dispatched(scheduledMs: number): void {
    this.metrics?.attemptDispatched(this.input.tenant, (Date.now() - scheduledMs) / 1000);
  }

  /** F2, F3: the call gives its slot back to wait (no attempt is used: none ends, so the series say it here). */
  waits(kind: 'turn' | 'slot', why: string): void {
    this.metrics?.callWaited(this.input.tenant, kind);
    this.span?.setAttributes({ [SpanAttr.waits]: `${kind}: ${why}` });
  }

  /** The server exists on this node, and (when it does) whether it lists the function: bounds the labels. */
  listed(server: boolean, fn: boolean): void {
    this.known = { server, fn };
  }

  /** The first stop's time: the cancel → stopped histogram runs from here. */
  stopping(): void {
    this.stoppedAt ??= performance.now();
  }

  /**
   * C1: the stopped attempt has stopped (its request cancelled, its sandbox stopped) and now only waits for Temporal's
   * own cancel of its activity: the stop's time ends here, not when that cancel comes.
   */
  stopped(): void {
    if (this.stoppedAt !== undefined) this.stoppedDone ??= performance.now();
  }

  /** B2: a busy server makes the call wait before its next attempt (this long, when it said; else Temporal's backoff). */
  busyWait(ms: number | undefined): void {
    const { tool, server } = callLabels(this.input.tool, this.known);
    this.metrics?.busyWait({ tool, server, tenant: this.input.tenant }, ms === undefined ? undefined : ms / 1000);
  }

  /** The MCP `tools/call` as a client span, child of the attempt's; its context rides in the request's `_meta`. */
  toolsCall(fn: string, connection: ServerConnection): McpCall {
    return new McpCall(this, fn, connection);
  }

  /** The attempt ended with this outcome (none: it only asked a person, A4); `final` when no attempt follows. */
  ended(outcome: Outcome | undefined, final: boolean): void {
    this.release?.();
    if (!outcome) return;
    const now = performance.now();
    this.span?.setAttribute(SpanAttr.outcome, outcome);
    if (outcome !== 'ok' && outcome !== 'error') this.span?.setAttribute(McpAttr.errorType, outcome);
    if (!this.metrics) return;
    const { tool, server } = callLabels(this.input.tool, this.known);
    this.metrics.attemptEnded({
      tool,
      server,
      tenant: this.input.tenant,
      outcome,
      seconds: (now - this.startedAt) / 1000,
      final,
      ...(this.stoppedAt !== undefined && outcome !== 'ok' && outcome !== 'error'
        ? { stoppedAfter: ((this.stoppedDone ?? now) - this.stoppedAt) / 1000 }
        : {}),
    });
  }

  /** @internal for McpCall */
  get parts() {
    return { metrics: this.metrics, input: this.input, attempt: this.attempt };
  }
}

/** One MCP `tools/call` client span: `tools/call <function>`, with the conventions' attributes and oz0's. */
export class McpCall {
  private readonly span: Span;
  private readonly startedAt = performance.now();
  /** `traceparent` and `tracestate` for the request's `_meta`: empty when nothing is traced. */
  readonly meta: Record<string, string> = {};
  private readonly unwatch?: () => void;

  constructor(
    private readonly watch: AttemptWatch,
    private readonly fn: string,
    private readonly connection: ServerConnection,
  ) {
    const { input, attempt } = watch.parts;
    const sessionId = connection.sessionId;
    this.span = tracer().startSpan(`tools/call ${fn}`, {
      kind: SpanKind.CLIENT,
      attributes: {
        [McpAttr.method]: 'tools/call',
        [SpanAttr.genAiToolName]: fn,
        [SpanAttr.genAiOperation]: 'execute_tool',
        [McpAttr.transport]: transportOf(connection),
        [McpAttr.protocolVersion]: connection.protocol,
        ...(sessionId ? { [McpAttr.sessionId]: sessionId } : {}),
        [SpanAttr.job]: input.jobId,
        [SpanAttr.tenant]: input.tenant,
        [SpanAttr.tool]: input.tool,
        [SpanAttr.key]: input.key,
        [SpanAttr.attempt]: attempt,
      },
    });
    // An unsampled call still says its trace and that it is not sampled, so its server's spans follow that (O3).
    propagation.inject(trace.setSpan(context.active(), this.span), this.meta);
    if (!this.span.isRecording()) return;
    // The request's own JSON-RPC id is known once the SDK sends it: found by this span's traceparent.
    if (this.meta.traceparent) {
      this.unwatch = connection.watchSent(this.meta.traceparent, (id) =>
        this.span.setAttribute(McpAttr.requestId, String(id)),
      );
    }
  }

  /** Runs fn with this span current, so what it logs names the span (O4). */
  within<T>(fn: () => Promise<T>): Promise<T> {
    return context.with(trace.setSpan(context.active(), this.span), fn);
  }

  /** The request answered (or failed, or was stopped with `stopped`'s outcome). */
  end(result: CallToolResult | undefined, err?: unknown, stopped?: Outcome): void {
    this.unwatch?.();
    const { metrics } = this.watch.parts;
    let errorType: string | undefined;
    if (result?.isError) errorType = TOOL_ERROR;
    else if (stopped) errorType = stopped;
    else if (err) {
      const code = (err as { code?: unknown }).code;
      errorType = typeof code === 'number' ? String(code) : ((err as Error).name ?? 'Error');
      if (typeof code === 'number') this.span.setAttribute(McpAttr.statusCode, String(code));
    }
    const outcome: Outcome = result
      ? busyOf(result)
        ? 'busy'
        : result.isError
          ? 'error'
          : 'ok'
      : (stopped ?? 'failed');
    this.span.setAttribute(SpanAttr.outcome, outcome);
    if (errorType) {
      this.span.setAttribute(McpAttr.errorType, errorType);
      this.span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
    }
    this.span.end();
    metrics?.mcpRequest(
      'tools/call',
      this.fn,
      errorType,
      transportOf(this.connection),
      (performance.now() - this.startedAt) / 1000,
    );
  }
}

/** A4-A9: the yes a call ran under, on its attempt's span: who gave it, and who the identity provider says they are. */
export function approvalAttributes(input: Pick<CallInput, 'key' | 'confirmed'>): Record<string, string> {
  const yes = input.confirmed?.key === input.key ? input.confirmed : undefined;
  if (!yes) return {};
  return {
    [SpanAttr.approvedBy]: yes.by,
    ...(yes.identity && {
      [SpanAttr.approvedIssuer]: yes.identity.issuer,
      [SpanAttr.approvedSubject]: yes.identity.subject,
    }),
  };
}
