/**
 * O2 with a sampler (`OTEL_TRACES_SAMPLER`): a job's trace is kept or dropped whole. A trace a job began (its workflow
 * marks it, having no sampler) is decided by the node's sampler by the trace's id, the same for each of its spans; a
 * trace a caller began follows the caller's decision as the configured sampler says. OpenTelemetry's own samplers
 * are the other side of each case.
 */
import { ROOT_CONTEXT, SpanKind, createTraceState, trace } from '@opentelemetry/api';
import type { SpanContext } from '@opentelemetry/api';
import { SamplingDecision, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace-base';
import { JOB_TRACE_STATE } from '../../model/spans';
import { JobTraceSampler, jobBegan } from '../../worker/sampling';

const spanId = '00f067aa0ba902b7';
/** Trace ids spread over the ratio sampler's range: the first 8 hex digits are what it reads. */
const traceIds = Array.from(
  { length: 64 },
  (_, i) => `${(i * 0x03ffffff).toString(16).padStart(8, '0')}${'a'.repeat(24)}`,
);

function under(parent: SpanContext | undefined) {
  return parent ? trace.setSpanContext(ROOT_CONTEXT, parent) : ROOT_CONTEXT;
}

function decides(sampler: JobTraceSampler, traceId: string, parent?: SpanContext): boolean {
  const result = sampler.shouldSample(under(parent), traceId, 'RunActivity:callTool', SpanKind.INTERNAL, {}, []);
  return result.decision === SamplingDecision.RECORD_AND_SAMPLED;
}

/** A span of a trace a job began, as its workflow put it in an activity's headers: sampled flag and all. */
const jobs = (traceId: string, traceFlags = 1): SpanContext => ({
  traceId,
  spanId,
  traceFlags,
  isRemote: true,
  traceState: createTraceState(`vendor=a,${JOB_TRACE_STATE}`),
});
const callers = (traceId: string, traceFlags: number): SpanContext => ({ traceId, spanId, traceFlags, isRemote: true });

test('O2: the mark of a trace a job began, in the trace state as a string or as OpenTelemetry keeps it', () => {
  expect(jobBegan({ traceState: JOB_TRACE_STATE })).toBe(true);
  expect(jobBegan({ traceState: `vendor=a, ${JOB_TRACE_STATE}` })).toBe(true);
  expect(jobBegan({ traceState: createTraceState(`${JOB_TRACE_STATE},vendor=a`) })).toBe(true);
  for (const state of [undefined, '', 'vendor=a', 'oz0=jobs', 'xoz0=job'])
    expect(jobBegan({ traceState: state })).toBe(false);
  expect(jobBegan(undefined)).toBe(false);
});

test('O2: by default every trace a job began is kept, and a caller’s decision is followed', () => {
  const sampler = new JobTraceSampler({ name: 'parentbased_always_on', ratio: 1 });
  for (const id of traceIds.slice(0, 8)) {
    expect(decides(sampler, id, jobs(id))).toBe(true);
    expect(sampler.keeps(id)).toBe(true);
    expect(decides(sampler, id, callers(id, 1))).toBe(true);
    expect(decides(sampler, id, callers(id, 0))).toBe(false);
    expect(decides(sampler, id)).toBe(true);
  }
});

test('O2: always_off keeps no span of a trace a job began, whatever flag its workflow wrote', () => {
  const sampler = new JobTraceSampler({ name: 'always_off', ratio: 1 });
  for (const id of traceIds.slice(0, 8)) {
    expect(decides(sampler, id, jobs(id, 1))).toBe(false);
    expect(sampler.keeps(id)).toBe(false);
  }
});

test.each(['traceidratio', 'parentbased_traceidratio'] as const)(
  'O2: %s decides a trace a job began by its id, the same for each span and as OpenTelemetry’s own ratio sampler does',
  (name) => {
    const sampler = new JobTraceSampler({ name, ratio: 0.5 });
    const reference = new TraceIdRatioBasedSampler(0.5);
    const kept = traceIds.filter((id) => {
      const expected = reference.shouldSample(ROOT_CONTEXT, id).decision === SamplingDecision.RECORD_AND_SAMPLED;
      // The workflow writes flag 1 on every span of it: the flag does not decide, the id does.
      expect(decides(sampler, id, jobs(id, 1))).toBe(expected);
      expect(decides(sampler, id, jobs(id, 0))).toBe(expected);
      expect(sampler.keeps(id)).toBe(expected);
      return expected;
    });
    // Both ways happen over these ids: the check above is not of one answer only.
    expect(kept.length).toBeGreaterThan(8);
    expect(kept.length).toBeLessThan(traceIds.length - 8);
  },
);

test('O2: parentbased_traceidratio follows a caller’s decision, whatever the trace’s id', () => {
  const sampler = new JobTraceSampler({ name: 'parentbased_traceidratio', ratio: 0 });
  for (const id of traceIds.slice(0, 8)) {
    expect(decides(sampler, id, callers(id, 1))).toBe(true);
    expect(decides(sampler, id, callers(id, 0))).toBe(false);
    expect(decides(sampler, id, jobs(id))).toBe(false);
  }
});
