/**
 * F1: a job started without its tenant as its fairness key (a plain `client.workflow.start`, or another tenant's key)
 * gets it from the node that checks its spec, so its next workflow tasks are dispatched fairly; its calls carry it
 * anyway (workflows/calls.ts). Only its first workflow task went unfairly: `jobPriority` on the start avoids that too.
 */
import { status as grpcStatus } from '@grpc/grpc-js';
import { isGrpcServiceError } from '@temporalio/client';
import type { Client } from '@temporalio/client';
import { compilePriority } from '@temporalio/common';
import { google } from '@temporalio/proto';
import type { Logger } from '../common/logger';
import { jobPriority } from '../model/shares';
import type { JobSpec } from '../model/schemas';

const NOT_FOUND_FAILURE = 'temporal.api.errordetails.v1.NotFoundFailure';

/**
 * Sets the job's fairness key on its run. Best effort, beside the job: a run that ended before this got there needs
 * nothing set and is not worth a line (a flood's jobs end by the hundred); any other failure is.
 */
export async function setFairnessKey(
  deps: { client: Client; logger?: Logger },
  run: { workflowId: string; runId: string },
  spec: JobSpec,
): Promise<void> {
  const { client, logger } = deps;
  try {
    await client.workflowService.updateWorkflowExecutionOptions({
      namespace: client.options.namespace,
      workflowExecution: run,
      workflowExecutionOptions: { priority: compilePriority(jobPriority(spec)) },
      updateMask: { paths: ['priority'] },
    });
    logger?.debug({ job: run.workflowId, tenant: spec.tenant }, 'job started without its fairness key: set it');
  } catch (err) {
    if (isRunGone(err)) return;
    logger?.warn({ job: run.workflowId, err: (err as Error).message }, "could not set the job's fairness key");
  }
}

/**
 * Temporal's answer for a run that ended (`workflow execution already completed`) or that it no longer knows: gRPC's
 * NOT_FOUND with a `NotFoundFailure` in its details. A namespace that is not found is NOT_FOUND too, with a
 * `NamespaceNotFoundFailure`: that one is a real failure.
 */
export function isRunGone(err: unknown): boolean {
  if (!isGrpcServiceError(err) || err.code !== grpcStatus.NOT_FOUND) return false;
  const [details] = err.metadata.get('grpc-status-details-bin');
  if (!Buffer.isBuffer(details)) return false;
  return (google.rpc.Status.decode(details).details ?? []).some((d) => d.type_url?.endsWith(`/${NOT_FOUND_FAILURE}`));
}
