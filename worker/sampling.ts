/**
 * Which traces a node records (O2): the sampler the standard `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`
 * name, applied to a job's whole trace. A trace a caller began follows the caller's decision (its parent's sampled
 * flag, as the configured sampler says). A trace a job began itself carries `JOB_TRACE_STATE`: its workflow made it
 * without a sampler, so each node asks its configured sampler about the trace's root, by the trace's id, for every
 * span of it (the job's and steps' from the workflow, the attempts' and the MCP calls' from the activities). A
 * ratio sampler decides by the id alone, so a trace is kept or dropped whole, on whichever nodes its job ran.
 * Loaded only by a node that traces.
 */
import { ROOT_CONTEXT, SpanKind, createTraceState, trace } from '@opentelemetry/api';
import type { Attributes, Context, Link, SpanContext } from '@opentelemetry/api';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  ParentBasedSampler,
  SamplingDecision,
  TraceIdRatioBasedSampler,
} from '@opentelemetry/sdk-trace-base';
import type { Sampler, SamplingResult } from '@opentelemetry/sdk-trace-base';
import { JOB_TRACE_MARK } from '../model/spans';
import type { SamplerChoice } from '../model/spans';

function configured({ name, ratio }: SamplerChoice): Sampler {
  const root = name.endsWith('always_on')
    ? new AlwaysOnSampler()
    : name.endsWith('always_off')
      ? new AlwaysOffSampler()
      : new TraceIdRatioBasedSampler(ratio);
  return name.startsWith('parentbased_') ? new ParentBasedSampler({ root }) : root;
}

/**
 * Whether a span context belongs to a trace a job began (see the top of this file): its trace state as OpenTelemetry
 * keeps it, or as the workflow's spans carry it, a W3C `tracestate` string.
 */
export function jobBegan(context: { traceState?: SpanContext['traceState'] | string } | undefined): boolean {
  const state = context?.traceState;
  if (!state) return false;
  return (typeof state === 'string' ? createTraceState(state) : state).get(JOB_TRACE_MARK.key) === JOB_TRACE_MARK.value;
}

export class JobTraceSampler implements Sampler {
  private readonly inner: Sampler;

  constructor(readonly choice: SamplerChoice) {
    this.inner = configured(choice);
  }

  shouldSample(
    context: Context,
    traceId: string,
    name: string,
    kind: SpanKind,
    attributes: Attributes,
    links: Link[],
  ): SamplingResult {
    if (jobBegan(trace.getSpanContext(context))) {
      return { decision: this.keeps(traceId) ? SamplingDecision.RECORD_AND_SAMPLED : SamplingDecision.NOT_RECORD };
    }
    return this.inner.shouldSample(context, traceId, name, kind, attributes, links);
  }

  /** Whether a span that ended without this sampler (the workflow's, by the sink) is kept: see the top of this file. */
  keepsSpan(context: { traceId: string; traceState?: string }): boolean {
    return !jobBegan(context) || this.keeps(context.traceId);
  }

  /** The configured sampler's answer for the root of a trace a job began: the same for every span of it. */
  keeps(traceId: string): boolean {
    const root = this.inner.shouldSample(ROOT_CONTEXT, traceId, 'RunWorkflow:job', SpanKind.INTERNAL, {}, []);
    return root.decision === SamplingDecision.RECORD_AND_SAMPLED;
  }

  toString(): string {
    return `JobTraceSampler{${this.inner.toString()}}`;
  }
}
