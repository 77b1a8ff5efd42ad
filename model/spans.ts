/**
 * The span attribute names oz0 sets (O2), written once: the workflows' interceptors (workflows/tracing.ts) name the
 * job and the step with them, the node (activities/observe/) each attempt and each gateway call. Pure.
 */
export const SpanAttr = {
  job: 'oz0.job',
  tenant: 'oz0.tenant',
  key: 'oz0.key',
  tool: 'oz0.tool',
  attempt: 'oz0.attempt',
  outcome: 'oz0.outcome',
  /** F2, F3: the attempt gave its slot back to wait, and why; on a step's span, how long it waited in all (ms). */
  waits: 'oz0.waits',
  waitedMs: 'oz0.waited_ms',
  /** A4-A9: who said yes to a call that waited for a person, and, from the inbox, who the identity provider says. */
  approvedBy: 'oz0.approval.by',
  approvedIssuer: 'oz0.approval.issuer',
  approvedSubject: 'oz0.approval.subject',
  /** Issue 56: the release and the build id of the node an attempt ran on (common/release.ts). */
  release: 'oz0.release',
  buildId: 'oz0.build_id',
  genAiToolName: 'gen_ai.tool.name',
  genAiOperation: 'gen_ai.operation.name',
} as const;

/**
 * The `tracestate` entry a job puts on a trace it begins (no caller's context in its start): the workflow cannot run
 * the node's sampler, so each node decides such a trace by its id with its own sampler, the same way on every node
 * and for every span of it (worker/sampling.ts).
 */
export const JOB_TRACE_MARK = { key: 'oz0', value: 'job' } as const;
export const JOB_TRACE_STATE = `${JOB_TRACE_MARK.key}=${JOB_TRACE_MARK.value}`;

/** The samplers OpenTelemetry's JavaScript SDK builds from `OTEL_TRACES_SAMPLER`, as a node takes them. */
export const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;

export interface SamplerChoice {
  name: (typeof SAMPLERS)[number];
  /** A ratio sampler's probability, 0 to 1 (OpenTelemetry's default 1). */
  ratio: number;
}
