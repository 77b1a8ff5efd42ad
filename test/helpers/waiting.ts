/** A4: jobs of one probe call that its tenant's policy says to confirm, as the inbox's tests start them. */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { waitingCallsQuery } from '../../model/messages';
import { eventually, uniqueId } from './temporal';

/** A job of `tenant` whose one call (`probe.probe` with `text`) waits for a person's answer. */
export function startProbeJob(
  client: Client,
  taskQueue: string,
  tenant: string,
  text: string,
): Promise<WorkflowHandle> {
  return client.workflow.start('job', {
    taskQueue,
    workflowId: uniqueId(`job-${tenant.slice(0, 4)}`),
    args: [{ tenant, steps: [{ call: 'probe.probe', args: { text } }] }],
  });
}

/** Until the job's call waits for a person. */
export function waitsForPerson(handle: WorkflowHandle): Promise<true> {
  return eventually(
    async () => ((await handle.query(waitingCallsQuery)).length ? true : undefined),
    30_000,
    'a call to wait',
  );
}
