/**
 * Reading and changing a tenant's policy workflow from a Temporal client: the CLI and the node use it. A
 * change starts the workflow if need be (seeded from the config), then applies the update.
 */
import { QueryNotRegisteredError, WithStartWorkflowOperation, WorkflowNotFoundError } from '@temporalio/client';
import type { Client } from '@temporalio/client';
import { sharesSeedOf } from './config';
import type { LoadedConfig } from './config';
import type { Shares } from '../model/shares';
import type { UpdateDefinition } from '@temporalio/common';
import { POLICY_WORKFLOW, emptyState, policyWorkflowId } from '../model/policy-rules';
import { policyOriginsQuery, policyStateQuery } from '../model/messages';
import type { TenantPolicyWorkflow } from '../model/messages';
import { seededOrigins } from '../model/origins';
import type { Origins } from '../model/origins';
import { StateWithOriginsSchema, TenantStateSchema } from '../model/schemas';
import type { Decision, PolicyInput, TenantState } from '../model/schemas';

export interface PolicyTarget {
  client: Client;
  taskQueue: string;
  /** The config's `tenants.<tenant>.policy`: seeds a tenant's workflow the first time it starts. */
  seeds: Record<string, Record<string, Decision>>;
  /** The config's shares of a tenant (F5: `tenants.<t>.fairness`, `.limits`), seeded the same way. */
  shareSeeds: Record<string, Shares>;
}

/** How a tenant's policy workflow starts, the first time anything needs it: seeded from the config. */
export function policyStart(target: Pick<PolicyTarget, 'taskQueue' | 'seeds' | 'shareSeeds'>, tenant: string) {
  const shares = Object.hasOwn(target.shareSeeds, tenant) ? target.shareSeeds[tenant] : undefined;
  return {
    workflowId: policyWorkflowId(tenant),
    taskQueue: target.taskQueue,
    args: [{ tenant, seed: target.seeds[tenant], ...(shares ? { shares } : {}) }] as [PolicyInput],
    workflowIdConflictPolicy: 'USE_EXISTING' as const,
    // F1: its tasks are its tenant's (the all-tenants workflow's, `*`, the platform's).
    priority: { fairnessKey: tenant },
  };
}

/** Applies one change to a tenant's policy (or to the all-tenants kill switches, tenant `*`). */
export async function changePolicy<Args extends unknown[]>(
  target: PolicyTarget,
  tenant: string,
  update: UpdateDefinition<TenantState, Args>,
  args: Args,
): Promise<TenantState> {
  const start = new WithStartWorkflowOperation<TenantPolicyWorkflow>(POLICY_WORKFLOW, policyStart(target, tenant));
  return target.client.workflow.executeUpdateWithStart(update, { args, startWorkflowOperation: start });
}

/** How long a read of a tenant's state may take before the call that needs it fails (nothing sent). */
const READ_DEADLINE_MS = 10_000;

/**
 * A tenant's current state; a tenant nobody changed yet has its config seed. I11: the answer is checked as a policy's
 * state (a workflow of another type under the policy's id answers no such query). `start` (the node): the policy
 * workflow is started, seeded, if it never was or if what stood under its id was not a policy and has ended, so a
 * tenant's policy holds its id before a call of it is checked.
 */
export async function readPolicy(
  target: Pick<PolicyTarget, 'client' | 'seeds' | 'shareSeeds'> & Partial<Pick<PolicyTarget, 'taskQueue'>>,
  tenant: string,
  opts: { start?: boolean } = {},
): Promise<TenantState> {
  const { client } = target;
  const workflowId = policyWorkflowId(tenant);
  const handle = client.workflow.getHandle(workflowId);
  const query = () => client.withDeadline(Date.now() + READ_DEADLINE_MS, () => handle.query(policyStateQuery));
  let answer: unknown;
  try {
    answer = await query();
  } catch (err) {
    const taskQueue = opts.start ? target.taskQueue : undefined;
    if (!taskQueue) {
      if (err instanceof WorkflowNotFoundError) return emptyState(target.seeds[tenant], target.shareSeeds[tenant]);
      throw err;
    }
    if (!(err instanceof WorkflowNotFoundError)) {
      // What stands under the id did not answer: a tenant's policy that could not (it is read again), or a workflow
      // of another type, which is never read as one; once that has ended, the tenant's policy starts in its place.
      const described = await handle.describe();
      if (described.type === POLICY_WORKFLOW) throw err;
      if (described.status.name === 'RUNNING')
        throw new Error(`${workflowId} is a ${described.type} workflow, not a tenant's policy: it is not read`);
    }
    await client.workflow.start(POLICY_WORKFLOW, policyStart({ ...target, taskQueue }, tenant));
    answer = await query();
  }
  const state = TenantStateSchema.safeParse(answer);
  if (!state.success) throw new Error(`${workflowId} did not answer as a tenant's policy: it is not read`);
  return state.data;
}

/**
 * A13: a tenant's current state and what of it a command set. A tenant nobody changed yet has its config seed, all of
 * it the config's; `origins` is undefined where its workflow runs an oz0 that keeps none (it answers no such query).
 */
export async function readOrigins(
  target: Pick<PolicyTarget, 'client' | 'seeds' | 'shareSeeds'>,
  tenant: string,
): Promise<{ state: TenantState; origins?: Origins }> {
  const { client } = target;
  const handle = client.workflow.getHandle(policyWorkflowId(tenant));
  let answer: unknown;
  try {
    answer = await client.withDeadline(Date.now() + READ_DEADLINE_MS, () => handle.query(policyOriginsQuery));
  } catch (err) {
    if (err instanceof WorkflowNotFoundError)
      return { state: emptyState(target.seeds[tenant], target.shareSeeds[tenant]), origins: seededOrigins() };
    // An older bundle (or a workflow that is not a policy, which readPolicy refuses to read).
    if (err instanceof QueryNotRegisteredError) return { state: await readPolicy(target, tenant) };
    throw err;
  }
  const read = StateWithOriginsSchema.safeParse(answer);
  if (!read.success) throw new Error(`${policyWorkflowId(tenant)} did not answer as a tenant's policy: it is not read`);
  return read.data;
}

/** Where a config's policy workflows live, with its seeds. */
export function policyTargetOf(config: Pick<LoadedConfig, 'temporal' | 'tenants'>, client: Client): PolicyTarget {
  const shareSeeds: Record<string, Shares> = {};
  for (const tenant of Object.keys(config.tenants)) {
    const shares = sharesSeedOf(config, tenant);
    if (shares) shareSeeds[tenant] = shares;
  }
  return { client, taskQueue: config.temporal.policyTaskQueue, seeds: seedsOf(config.tenants), shareSeeds };
}

/** The config's tenant policies, as seeds. */
export function seedsOf(tenants: Record<string, { policy: Record<string, Decision> }>): PolicyTarget['seeds'] {
  return Object.fromEntries(Object.entries(tenants).map(([name, t]) => [name, t.policy]));
}
