/**
 * The workflow side of tracing (O2), in the workflow bundle of a node that exports spans (worker/bundle.ts says why
 * only there); the commands are the same with it or without, so a job moves between such nodes freely (T5).
 *
 * The spans are those Temporal's OpenTelemetry interceptors made, by the same names and in the same tree — the job's
 * run (`RunWorkflow:job`, child of the context its start carried in its headers), each Update and signal it handles,
 * each call step (`StartActivity:callTool`, from its scheduling to its last attempt's end, retries included; its
 * context goes to the activity in the `_tracer-data` header, as theirs did, so each attempt's span is its child) and
 * the continue-as-new that links one run to the next — but none of OpenTelemetry's SDK runs in the workflow (issue
 * 36.1). Theirs kept, in every cached job, an AsyncLocalStorage context manager, a tracer and each open span's object
 * for the job's whole life: a node tracing 500 running calls held ~1 GB against 440 MiB untraced. Here an open span
 * is a few strings and a time, the current span is found from the job's own state (the Update being handled, by
 * Temporal's update scope, else the run), and a span leaves the workflow once, whole, when it ends, through the
 * `exporter` sink, which Temporal never calls during a replay. Ids come from the workflow's seeded Math.random: a
 * replay makes the same ones, and no workflow code of oz0 draws from it.
 */
import {
  ApplicationFailure,
  ContinueAsNew,
  currentUpdateInfo,
  defaultPayloadConverter,
  proxySinks,
  workflowInfo,
} from '@temporalio/workflow';
import type {
  ActivityInput,
  ContinueAsNewInput,
  LocalActivityInput,
  Next,
  SignalInput,
  UpdateInput,
  WorkflowExecuteInput,
  WorkflowInboundCallsInterceptor,
  WorkflowInterceptors,
  WorkflowOutboundCallsInterceptor,
} from '@temporalio/workflow';
import type { Headers } from '@temporalio/common';
import type { OpenTelemetrySinks, SerializableSpan } from '@temporalio/interceptors-opentelemetry/lib/workflow';
import type { CallInput } from '../model/activities';
import { JOB_TRACE_STATE, SpanAttr } from '../model/spans';

/** Where Temporal's interceptors carry a span's context (W3C `traceparent`, `tracestate`) in headers. */
const TRACE_HEADER = '_tracer-data';
const INTERNAL = 0;
const UNSET = 0;
const OK = 1;
const ERROR = 2;

type Attributes = Record<string, string | number | boolean>;

/** A span's context as W3C trace context carries it. */
interface SpanContext {
  traceId: string;
  spanId: string;
  traceFlags: number;
  traceState?: string;
}

/** An open span: what its export will say, and nothing more. */
interface OpenSpan {
  name: string;
  context: SpanContext;
  parentSpanId?: string;
  startMs: number;
  attributes: Attributes;
}

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The context a caller put in headers, if any and valid. */
export function contextOf(headers: Headers): SpanContext | undefined {
  const payload = headers[TRACE_HEADER];
  if (!payload) return undefined;
  const carrier = defaultPayloadConverter.fromPayload<{ traceparent?: unknown; tracestate?: unknown }>(payload);
  const m = typeof carrier?.traceparent === 'string' ? TRACEPARENT.exec(carrier.traceparent) : null;
  if (!m || /^0+$/.test(m[1]) || /^0+$/.test(m[2])) return undefined;
  const traceState = typeof carrier.tracestate === 'string' && carrier.tracestate ? carrier.tracestate : undefined;
  return { traceId: m[1], spanId: m[2], traceFlags: parseInt(m[3], 16), ...(traceState ? { traceState } : {}) };
}

/** Headers that carry `span`'s context, as Temporal's interceptors write them (their activity side reads it). */
export function withContext(headers: Headers, span: Pick<OpenSpan, 'context'>): Headers {
  const { traceId, spanId, traceFlags, traceState } = span.context;
  const carrier = {
    traceparent: `00-${traceId}-${spanId}-${traceFlags.toString(16).padStart(2, '0')}`,
    ...(traceState ? { tracestate: traceState } : {}),
  };
  return { ...headers, [TRACE_HEADER]: defaultPayloadConverter.toPayload(carrier) };
}

function hex(bytes: number): string {
  let out = '';
  for (let i = 0; i < bytes; i++)
    out += Math.floor(Math.random() * 256)
      .toString(16)
      .padStart(2, '0');
  return out;
}

const hrTime = (ms: number): [number, number] => [Math.floor(ms / 1000), Math.round((ms % 1000) * 1e6)];

function tenantOf(args: unknown[]): string | undefined {
  const spec = args[0] as { tenant?: unknown } | undefined;
  return typeof spec?.tenant === 'string' ? spec.tenant : undefined;
}

/** One workflow's spans: its run's, the Updates' in progress, and the way each leaves. */
class WorkflowSpans {
  run?: OpenSpan;
  private readonly updates = new Map<string, OpenSpan>();
  private readonly sink = proxySinks<OpenTelemetrySinks>().exporter;

  /**
   * A span, child of `parent`; without one, the root of a trace this job begins, marked so that each node's sampler
   * decides the trace by its id (worker/sampling.ts): the workflow has no sampler of its own.
   */
  open(name: string, parent: SpanContext | undefined, attributes: Attributes = {}): OpenSpan {
    const traceState = parent ? parent.traceState : JOB_TRACE_STATE;
    return {
      name,
      context: {
        traceId: parent?.traceId ?? hex(16),
        spanId: hex(8),
        traceFlags: parent?.traceFlags ?? 1,
        ...(traceState ? { traceState } : {}),
      },
      ...(parent ? { parentSpanId: parent.spanId } : {}),
      startMs: Date.now(),
      attributes,
    };
  }

  /** The span new work starts under: the Update being handled, else the run. */
  current(): OpenSpan | undefined {
    const update = currentUpdateInfo();
    return (update && this.updates.get(update.id)) ?? this.run;
  }

  /** Runs `fn` inside `span`, then ends it: OK, or the error it threw (`acceptable` ones count as OK). */
  within<T>(span: OpenSpan, fn: () => Promise<T>, acceptable?: (err: unknown) => boolean): Promise<T> {
    return settled(
      fn,
      () => this.end(span, { code: OK }),
      (err) => this.end(span, acceptable?.(err) ? { code: OK } : failed(err)),
    );
  }

  inUpdate<T>(input: UpdateInput, fn: () => Promise<T>): Promise<T> {
    const span = this.open(`HandleUpdate:${input.name}`, contextOf(input.headers) ?? this.run?.context, {
      temporalUpdateId: input.updateId,
    });
    this.updates.set(input.updateId, span);
    const end = (status: { code: number; message?: string }) => {
      this.updates.delete(input.updateId);
      this.end(span, status);
    };
    // T5: the Update's own promise goes back as it is, so that it completes in the same turn as on a node that does
    // not trace: one turn later, its completion came after the commands its handler's effects made in that turn (a
    // waiting call's answer: the timer's cancel first), and a job answered on one kind of node failed to replay on the
    // other (test/integration/previous-histories.test.ts). The span ends beside it.
    let result: Promise<T>;
    try {
      result = Promise.resolve(fn());
    } catch (err) {
      end(failed(err));
      throw err;
    }
    result.then(
      () => end({ code: OK }),
      (err: unknown) => end(failed(err)),
    );
    return result;
  }

  end(span: OpenSpan, status: { code: number; message?: string }): void {
    const endMs = Math.max(Date.now(), span.startMs);
    const exported: SerializableSpan = {
      name: span.name,
      kind: INTERNAL,
      spanContext: span.context,
      ...(span.parentSpanId ? { parentSpanId: span.parentSpanId } : {}),
      startTime: hrTime(span.startMs),
      endTime: hrTime(endMs),
      duration: hrTime(endMs - span.startMs),
      status,
      attributes: span.attributes,
      links: [],
      events: [],
      ended: true,
      droppedAttributesCount: 0,
      droppedEventsCount: 0,
      droppedLinksCount: 0,
      instrumentationLibrary: { name: 'oz0-workflow' },
    };
    this.sink.export([exported]);
  }
}

/**
 * `fn()`'s promise, with `ok` or `fail` run when it settles: what an async function awaiting it would do, in the same
 * turns of the microtask queue, so the workflow's code after it runs in the same order as with one (T5: the promises'
 * order decides which of two things settling in one activation the job sees first), but with one promise where the
 * async function makes two. In a workflow each promise is a stack trace the SDK captures (its promise hook, for the
 * stack trace query), and this wraps every call step (issue 36.2, O5). `Promise.resolve` is the one an `await` does
 * (a promise stays itself, anything else is wrapped), and a synchronous throw rejects as an async function's would.
 * test/unit/workflow-tracing.test.ts races it against an async function, turn by turn.
 */
export function settled<T>(fn: () => Promise<T>, ok: () => void, fail: (err: unknown) => void): Promise<T> {
  let promise: Promise<T>;
  try {
    promise = Promise.resolve(fn());
  } catch (err) {
    fail(err);
    return Promise.reject(err);
  }
  return promise.then(
    (result) => {
      ok();
      return result;
    },
    (err: unknown) => {
      fail(err);
      throw err;
    },
  );
}

/** As Temporal's interceptors say a failure: a benign ApplicationFailure leaves the status unset. */
function failed(err: unknown): { code: number; message: string } {
  const message = err instanceof Error ? err.message : String(err);
  const benign = err instanceof ApplicationFailure && err.category === 'BENIGN';
  return { code: benign ? UNSET : ERROR, message };
}

class Inbound implements WorkflowInboundCallsInterceptor {
  constructor(private readonly spans: WorkflowSpans) {}

  execute(input: WorkflowExecuteInput, next: Next<WorkflowInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    const info = workflowInfo();
    const attributes: Attributes = {};
    if (info.workflowType === 'job') {
      attributes[SpanAttr.job] = info.workflowId;
      const tenant = tenantOf(input.args);
      if (tenant) attributes[SpanAttr.tenant] = tenant;
    }
    const run = this.spans.open(`RunWorkflow:${info.workflowType}`, contextOf(input.headers), attributes);
    this.spans.run = run;
    return this.spans.within(
      run,
      () => next(input),
      (err) => err instanceof ContinueAsNew,
    );
  }

  handleUpdate(input: UpdateInput, next: Next<WorkflowInboundCallsInterceptor, 'handleUpdate'>): Promise<unknown> {
    return this.spans.inUpdate(input, () => next(input));
  }

  handleSignal(input: SignalInput, next: Next<WorkflowInboundCallsInterceptor, 'handleSignal'>): Promise<void> {
    const span = this.spans.open(
      `HandleSignal:${input.signalName}`,
      contextOf(input.headers) ?? this.spans.current()?.context,
    );
    return this.spans.within(span, () => next(input));
  }
}

/** Names the call on its step's span: the tool, its key, its tenant. */
function stepAttributes(input: ActivityInput): Attributes {
  if (input.activityType !== 'callTool') return {};
  const call = input.args[0] as CallInput;
  return {
    [SpanAttr.job]: call.jobId,
    [SpanAttr.tenant]: call.tenant,
    [SpanAttr.tool]: call.tool,
    [SpanAttr.key]: call.key,
    [SpanAttr.genAiToolName]: call.tool.slice(call.tool.indexOf('.') + 1),
    [SpanAttr.genAiOperation]: 'execute_tool',
  };
}

class Outbound implements WorkflowOutboundCallsInterceptor {
  constructor(private readonly spans: WorkflowSpans) {}

  scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>) {
    const span = this.spans.open(
      `StartActivity:${input.activityType}`,
      this.spans.current()?.context,
      stepAttributes(input),
    );
    return this.spans.within(span, () => next({ ...input, headers: withContext(input.headers, span) }));
  }

  scheduleLocalActivity(
    input: LocalActivityInput,
    next: Next<WorkflowOutboundCallsInterceptor, 'scheduleLocalActivity'>,
  ) {
    const span = this.spans.open(`StartActivity:${input.activityType}`, this.spans.current()?.context);
    return this.spans.within(span, () => next({ ...input, headers: withContext(input.headers, span) }));
  }

  continueAsNew(input: ContinueAsNewInput, next: Next<WorkflowOutboundCallsInterceptor, 'continueAsNew'>) {
    // The next run's span is this one's child, so the runs of one job make one trace.
    const span = this.spans.open(`ContinueAsNew:${input.options.workflowType}`, this.spans.current()?.context);
    return this.spans.within(
      span,
      () => next({ ...input, headers: withContext(input.headers, span) }),
      (err) => err instanceof ContinueAsNew,
    );
  }

  getLogAttributes(
    input: Record<string, unknown>,
    next: Next<WorkflowOutboundCallsInterceptor, 'getLogAttributes'>,
  ): Record<string, unknown> {
    const span = this.spans.current();
    return span ? next({ trace_id: span.context.traceId, span_id: span.context.spanId, ...input }) : next(input);
  }
}

export const interceptors = (): WorkflowInterceptors => {
  const spans = new WorkflowSpans();
  return { inbound: [new Inbound(spans)], outbound: [new Outbound(spans)] };
};
