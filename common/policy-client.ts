/**
 * Reading and changing a tenant's policy workflow from a Temporal client: the CLI and the node use it. A
 * change starts the workflow if need be (seeded from the config), then applies the update.
 */
import { WithStartWorkflowOperation, WorkflowNotFoundError } from '@temporalio/client';
import type { Client } from '@temporalio/client';
import { sharesSeedOf } from './config';
import type { LoadedConfig } from './config';
import type { Shares } from '../model/shares';
import type { UpdateDefinition } from '@temporalio/common';
import { POLICY_WORKFLOW, emptyState, policyWorkflowId } from '../model/policy-rules';
import { policyStateQuery } from '../model/messages';
import type { TenantPolicyWorkflow } from '../model/messages';
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

/** A tenant's current state; a tenant nobody changed yet has its config seed. */
export async function readPolicy(
  target: Pick<PolicyTarget, 'client' | 'seeds' | 'shareSeeds'>,
  tenant: string,
): Promise<TenantState> {
  try {
    return await target.client.withDeadline(Date.now() + READ_DEADLINE_MS, () =>
      target.client.workflow.getHandle(policyWorkflowId(tenant)).query(policyStateQuery),
    );
  } catch (err) {
    if (err instanceof WorkflowNotFoundError) return emptyState(target.seeds[tenant], target.shareSeeds[tenant]);
    throw err;
  }
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
