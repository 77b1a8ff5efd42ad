/**
 * A tenant's share of the platform, from a Temporal client (SPEC F1, F5): the CLI and the node use it. A tenant's
 * weight lives in Temporal's task-queue config (its fairness-weight overrides win over a task's own weight), so it
 * holds for every task scheduled after the change, whoever started the job; this writes it on the queues oz0 uses.
 */
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { WorkflowNotFoundError } from '@temporalio/client';
import { DEFAULT_WEIGHT, sharesWorkflowId } from '../model/shares';
import type { Shares } from '../model/shares';
import { limiterStatusQuery, limitsSignal } from '../model/messages';
import type { LimiterStatus } from '../model/limiter';

const { TaskQueueType } = temporal.api.enums.v1;

/** A task queue and the kinds of tasks oz0 puts on it. */
export interface QueueOf {
  name: string;
  workflows: boolean;
  activities: boolean;
}

/** The queues of a config: the shared one (jobs and their calls) and the policy one (policies and limiters). */
export function sharedQueues(temporalConfig: { taskQueue: string; policyTaskQueue: string }): QueueOf[] {
  const queues: QueueOf[] = [{ name: temporalConfig.taskQueue, workflows: true, activities: true }];
  if (temporalConfig.policyTaskQueue !== temporalConfig.taskQueue)
    queues.push({ name: temporalConfig.policyTaskQueue, workflows: true, activities: false });
  return queues;
}

/**
 * F1: writes tenants' weights into the queues' config: an override for a weight other than 1, none (Temporal's
 * default, 1) for 1. Temporal keeps at most 1,000 overrides a queue (`matching.maxFairnessKeyWeightOverrides`).
 */
export async function applyWeights(
  client: Client,
  queues: readonly QueueOf[],
  weights: Record<string, number>,
  identity: string,
): Promise<void> {
  const set: Record<string, number> = {};
  const unset: string[] = [];
  for (const [tenant, weight] of Object.entries(weights)) {
    if (weight === DEFAULT_WEIGHT) unset.push(tenant);
    else set[tenant] = weight;
  }
  if (Object.keys(set).length === 0 && unset.length === 0) return;
  const requests = queues.flatMap((q) =>
    [
      ...(q.workflows ? [TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW] : []),
      ...(q.activities ? [TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY] : []),
    ].map((taskQueueType) => ({ name: q.name, taskQueueType })),
  );
  await Promise.all(
    requests.map(({ name, taskQueueType }) =>
      client.workflowService.updateTaskQueueConfig({
        namespace: client.options.namespace,
        identity,
        taskQueue: name,
        taskQueueType,
        setFairnessWeightOverrides: set,
        unsetFairnessWeightOverrides: unset,
      }),
    ),
  );
}

/** F1: the weights a queue's config holds now, by tenant (Temporal's default, 1, for any other). */
export async function weightsOn(client: Client, queue: string): Promise<Record<string, number>> {
  const described = await client.workflowService.describeTaskQueue({
    namespace: client.options.namespace,
    taskQueue: { name: queue },
    taskQueueType: TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
    reportConfig: true,
  });
  return { ...(described.config?.fairnessWeightOverrides ?? {}) };
}

/** F5: new limits reach the tenant's limiter at once (its calls in line may fit now); nothing if it has none yet. */
export async function tellLimiter(client: Client, tenant: string, version: number, shares: Shares): Promise<void> {
  try {
    await client.workflow.getHandle(sharesWorkflowId(tenant)).signal(limitsSignal, { version, limits: shares.limits });
  } catch (err) {
    if (!(err instanceof WorkflowNotFoundError)) throw err;
  }
}

/** F5: what a tenant's limiter counts now; undefined when it has none (no cap or rate was ever asked of). */
export async function limiterStatus(client: Client, tenant: string): Promise<LimiterStatus | undefined> {
  try {
    return await client.workflow.getHandle(sharesWorkflowId(tenant)).query(limiterStatusQuery);
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return undefined;
    throw err;
  }
}
