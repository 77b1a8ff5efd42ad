/**
 * Asks Temporal whose a job is (its `Oz0Tenant`), for a process that must write a payload of a job it has read nothing
 * of yet (./owners.ts): a client answering a call of a job it never started, a node taking over an old job.
 */
import type { Client } from '@temporalio/client';
import { Oz0Tenant } from '../model/job';
import type { OwnerLookup } from './owners';

export function ownerLookupOf(client: Client): OwnerLookup {
  return async (workflowId) => {
    const described = await client.workflow.getHandle(workflowId).describe();
    return described.typedSearchAttributes.get(Oz0Tenant);
  };
}
