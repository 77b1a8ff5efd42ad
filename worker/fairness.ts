/**
 * F1 at a node's start: does the Temporal server dispatch by fairness key? Nothing in Temporal's API says (self-hosted,
 * it is the dynamic config `matching.enableFairness`; on Temporal Cloud, the namespace's setting), so the node tries:
 * on a queue of its own that no worker polls, it starts a few workflows keyed `a`, then as many keyed `b` with a far
 * larger weight, and takes their first tasks itself. Fair dispatch hands out `b`'s first; first come, first served
 * hands out `a`'s. The workflows are ended at once, and time out by themselves if the node dies meanwhile.
 */
import { randomBytes } from 'node:crypto';
import { setMaxListeners } from 'node:events';
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { applyWeights } from '../common/shares-client';
import type { QueueOf } from '../common/shares-client';
import type { Logger } from '../common/logger';

/**
 * Workflows of each key. A queue's partitions (4 by default) each dispatch in their own order, and a poll takes from
 * any: with 20 of each, fair dispatch still hands out mostly `b`'s first, and first come, first served mostly `a`'s.
 */
const PER_KEY = 20;
const PROBE_WORKFLOW = 'oz0FairnessProbe';

/** `unclear`: neither order held, as when the queue has several partitions, each dispatching in its own order. */
export type FairnessFound = 'on' | 'off' | 'unclear';

/** What a node says when fairness is off, or not clearly on, naming the settings (docs/tenants.md has more). */
export const FAIRNESS_SAID: Record<Exclude<FairnessFound, 'on'>, string> = {
  off:
    "Temporal's fairness is off on this server: tasks are dispatched first come, first served, so one tenant's " +
    "backlog holds every other tenant's jobs behind it (SPEC F1). Self-hosted: set the dynamic config " +
    'matching.enableFairness to true; Temporal Cloud: turn fairness on in the namespace settings. See docs/tenants.md.',
  unclear:
    "Temporal's dispatch on this server is not clearly fair by tenant: its task queues likely have several " +
    "partitions, each dispatching in its own order, so a tenant's backlog may still hold another's calls. " +
    'Self-hosted: set the dynamic config matching.enableFairness to true and matching.numTaskqueueReadPartitions ' +
    'and matching.numTaskqueueWritePartitions to 1 for the oz0 queues. See docs/tenants.md.',
};

/**
 * Probes, and once more when the order was unclear: a loaded server may not yet have read every task of the probe's
 * queue from its store when the first polls come (seen on `npm run cluster` during a bench), so it hands out the
 * ones it read first. A second look on a new queue tells that from partitions, which stay unclear.
 */
export async function probeFairness(client: Client, signal: AbortSignal): Promise<FairnessFound> {
  // Each poll listens to the signal while it runs: more than Node's default ten in all, none left behind.
  setMaxListeners(PER_KEY * 2 + 10, signal);
  const found = await probeOnce(client, signal);
  return found === 'unclear' && !signal.aborted ? probeOnce(client, signal) : found;
}

async function probeOnce(client: Client, signal: AbortSignal): Promise<FairnessFound> {
  const id = randomBytes(4).toString('hex');
  const queue = `oz0-probe/fairness/${id}`;
  const ids: string[] = [];
  const start = async (key: 'a' | 'b', i: number) => {
    const workflowId = `${queue}/${key}${i}`;
    ids.push(workflowId);
    await client.workflow.start(PROBE_WORKFLOW, {
      taskQueue: queue,
      workflowId,
      args: [],
      workflowExecutionTimeout: '1 minute',
      priority: { fairnessKey: `oz0-probe-${key}`, fairnessWeight: key === 'a' ? 1 : 1000 },
    });
  };
  try {
    // Every `a` before any `b`: each is written before the next starts.
    for (let i = 0; i < PER_KEY; i++) await start('a', i);
    await Promise.all(Array.from({ length: PER_KEY }, (_, i) => start('b', i)));
    let b = 0;
    await client.withAbortSignal(signal, async () => {
      for (let i = 0; i < PER_KEY && !signal.aborted; i++) {
        const task = await client.withDeadline(Date.now() + 5000, () =>
          client.workflowService.pollWorkflowTaskQueue({
            namespace: client.options.namespace,
            taskQueue: { name: queue, kind: temporal.api.enums.v1.TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
            identity: `oz0 fairness probe ${id}`,
          }),
        );
        if (task.workflowExecution?.workflowId?.startsWith(`${queue}/b`)) b++;
      }
    });
    if (b >= PER_KEY * 0.7) return 'on';
    if (b <= PER_KEY * 0.3) return 'off';
    return 'unclear';
  } finally {
    await Promise.all(
      ids.map((workflowId) =>
        client.workflow
          .getHandle(workflowId)
          .terminate('oz0 fairness probe done')
          .catch(() => undefined),
      ),
    );
  }
}

/**
 * F1, F5: a node keeps its tenants' weights in the config of the queues it serves: at start for the tenants its config
 * names, then for each tenant whose weight it learns anew (its policy changed, `oz0 tenant set`). Writes are
 * idempotent, so nodes that learn the same change each write it; one at a time per node.
 */
export class WeightKeeper {
  private readonly applied = new Map<string, number>();
  private writing: Promise<void> = Promise.resolve();

  constructor(
    private readonly client: Client,
    private readonly queues: QueueOf[],
    private readonly identity: string,
    private readonly logger: Logger,
  ) {}

  learn(tenant: string, weight: number): void {
    if (this.applied.get(tenant) === weight) return;
    this.applied.set(tenant, weight);
    this.writing = this.writing
      .then(() => applyWeights(this.client, this.queues, { [tenant]: weight }, this.identity))
      .then(
        () => this.logger.debug({ tenant, weight }, 'fairness weight written to the task queues'),
        (err: Error) => {
          this.applied.delete(tenant);
          this.logger.warn(
            { tenant, weight, err: err.message },
            'could not write a fairness weight to the task queues',
          );
        },
      );
  }

  /** Resolves when every write asked so far is done. */
  settled(): Promise<void> {
    return this.writing;
  }
}
