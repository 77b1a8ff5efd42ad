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
  genAiToolName: 'gen_ai.tool.name',
  genAiOperation: 'gen_ai.operation.name',
} as const;
