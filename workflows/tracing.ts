/**
 * The workflow side of tracing (O2), in the workflow bundle of a node that exports spans (worker/bundle.ts says why
 * only there); the commands are the same with it or without, so a job moves between such nodes freely (T5). Temporal's
 * OpenTelemetry interceptors make the spans — the job's run (`RunWorkflow:job`), each call step
 * (`StartActivity:callTool`, from its scheduling to its last attempt's end, retries included) — and carry their
 * context to the activities in headers; oz0's own interceptors, inside theirs, name the job and the step on them.
 *
 * Spans made here leave the workflow through the `exporter` sink, which Temporal never calls during a replay.
 */
import * as otel from '@opentelemetry/api';
import { interceptors as temporalTracing } from '@temporalio/interceptors-opentelemetry/lib/workflow-interceptors';
import { workflowInfo } from '@temporalio/workflow';
import type {
  ActivityInput,
  Next,
  WorkflowExecuteInput,
  WorkflowInboundCallsInterceptor,
  WorkflowInterceptors,
  WorkflowOutboundCallsInterceptor,
} from '@temporalio/workflow';
import type { CallInput } from '../model/activities';
import { SpanAttr } from '../model/spans';

function tenantOf(args: unknown[]): string | undefined {
  const spec = args[0] as { tenant?: unknown } | undefined;
  return typeof spec?.tenant === 'string' ? spec.tenant : undefined;
}

/** Names the job on its run's span: `oz0.job` (the workflow id) and `oz0.tenant`. */
class JobSpanInbound implements WorkflowInboundCallsInterceptor {
  execute(input: WorkflowExecuteInput, next: Next<WorkflowInboundCallsInterceptor, 'execute'>): Promise<unknown> {
    const span = otel.trace.getActiveSpan();
    const info = workflowInfo();
    if (span && info.workflowType === 'job') {
      span.setAttribute(SpanAttr.job, info.workflowId);
      const tenant = tenantOf(input.args);
      if (tenant) span.setAttribute(SpanAttr.tenant, tenant);
    }
    return next(input);
  }
}

/** Names the call on its step's span: the tool, its key, its tenant. */
class StepSpanOutbound implements WorkflowOutboundCallsInterceptor {
  scheduleActivity(input: ActivityInput, next: Next<WorkflowOutboundCallsInterceptor, 'scheduleActivity'>) {
    const span = otel.trace.getActiveSpan();
    if (span && input.activityType === 'callTool') {
      const call = input.args[0] as CallInput;
      span.setAttributes({
        [SpanAttr.job]: call.jobId,
        [SpanAttr.tenant]: call.tenant,
        [SpanAttr.tool]: call.tool,
        [SpanAttr.key]: call.key,
        [SpanAttr.genAiToolName]: call.tool.slice(call.tool.indexOf('.') + 1),
        [SpanAttr.genAiOperation]: 'execute_tool',
      });
    }
    return next(input);
  }
}

/** Temporal's interceptors first (outermost), so oz0's run inside their spans. */
export const interceptors = (): WorkflowInterceptors => {
  const temporal = temporalTracing();
  return {
    inbound: [...(temporal.inbound ?? []), new JobSpanInbound()],
    outbound: [...(temporal.outbound ?? []), new StepSpanOutbound()],
    internals: temporal.internals ?? [],
  };
};
