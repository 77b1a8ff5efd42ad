/**
 * O2-O3 on the gateway's side: a harness's `tools/call` as a server span. It continues the harness's own trace from
 * the `traceparent` (and `tracestate`) in the request's `_meta` (MCP SEP-414); a harness that sends none has its calls
 * under the session's span (`RunActivity:runHarness`), so a job's spans stay one trace. The job's Update runs inside
 * it, so the call's step, attempts and MCP request are its children (Temporal's client interceptor carries it).
 */
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, context, propagation, trace } from '@opentelemetry/api';
import type { Context, Span } from '@opentelemetry/api';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { SpanAttr } from '../../model/spans';
import { McpAttr, TOOL_ERROR, TRACER_NAME } from './attempt';

/**
 * The trace context a harness is started in, for its environment: `OZ0_TRACEPARENT`, `OZ0_TRACESTATE` (none when
 * nothing is traced). OpenTelemetry's environment carrier calls them TRACEPARENT and TRACESTATE; a harness's
 * environment holds only what its config names and OZ0_* (SPEC I5, H2), so they carry oz0's prefix.
 */
export function traceEnv(): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagation.inject(context.active(), carrier);
  return Object.fromEntries(Object.entries(carrier).map(([k, v]) => [`OZ0_${k.toUpperCase()}`, v]));
}

/** The context current now: where a harness's calls go when it sends no traceparent of its own. */
export function currentContext(): Context {
  return context.active();
}

export interface GatewayCallSpan {
  within<T>(fn: () => Promise<T>): Promise<T>;
  end(result: CallToolResult | undefined, err?: unknown): void;
}

/** The gateway's span for one harness call: its parent from `_meta` when the harness sent one, else `session`. */
export function gatewayCallSpan(opts: {
  tool: string;
  meta: Record<string, unknown> | undefined;
  session: Context;
  requestId: string | number | undefined;
  sessionId: string | undefined;
  protocol: string | undefined;
  attributes: { job: string; tenant: string };
}): GatewayCallSpan {
  const carrier: Record<string, string> = {};
  for (const name of ['traceparent', 'tracestate']) {
    const value = opts.meta?.[name];
    if (typeof value === 'string') carrier[name] = value;
  }
  const parent = carrier.traceparent ? propagation.extract(ROOT_CONTEXT, carrier) : opts.session;
  const span: Span = trace.getTracer(TRACER_NAME).startSpan(
    `tools/call ${opts.tool}`,
    {
      kind: SpanKind.SERVER,
      attributes: {
        [McpAttr.method]: 'tools/call',
        [SpanAttr.genAiToolName]: opts.tool,
        [SpanAttr.genAiOperation]: 'execute_tool',
        [McpAttr.transport]: 'tcp',
        ...(opts.requestId !== undefined ? { [McpAttr.requestId]: String(opts.requestId) } : {}),
        ...(opts.sessionId ? { [McpAttr.sessionId]: opts.sessionId } : {}),
        ...(opts.protocol ? { [McpAttr.protocolVersion]: opts.protocol } : {}),
        [SpanAttr.job]: opts.attributes.job,
        [SpanAttr.tenant]: opts.attributes.tenant,
      },
    },
    parent,
  );
  return {
    within: (fn) => context.with(trace.setSpan(parent, span), fn),
    end(result, err) {
      const errorType = result?.isError ? TOOL_ERROR : err ? ((err as Error).name ?? 'Error') : undefined;
      if (errorType) {
        span.setAttribute(McpAttr.errorType, errorType);
        span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
      }
      span.end();
    },
  };
}
