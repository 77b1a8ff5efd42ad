/**
 * A tenant's share of the platform, as `oz0 tenant status|set` shows and changes it (SPEC F5): its weight, the
 * highest priority its jobs may ask, its caps and rates (durable in its policy workflow), what its limiter counts, and
 * its calls in Temporal now.
 */
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { changePolicy, readOrigins, readPolicy } from '../common/policy-client';
import type { PolicyTarget } from '../common/policy-client';
import { applyWeights, limiterStatus, sharedQueues, tellLimiter } from '../common/shares-client';
import { setSharesUpdate } from '../model/messages';
import { ALL_TENANTS, POLICY_WORKFLOW, sharesOf } from '../model/policy-rules';
import { Oz0Tenant, JOB_WORKFLOW } from '../model/job';
import type { Limit, Shares } from '../model/shares';
import type { LimiterStatus } from '../model/limiter';
import { sharesWorkflowId } from '../model/shares';
import { optionalTsToMs } from '@temporalio/common/lib/time';
import { shareSources } from '../model/origins';
import type { Source } from '../model/origins';

/** At most this many of a tenant's running jobs are looked into for their calls (one describe each). */
const JOBS_LOOKED = 50;

export interface TenantShown {
  tenant: string;
  /** The policy version its shares are as of. */
  version: number;
  /**
   * `set` when a command (`oz0 tenant set`) set any field of its shares, else where they all came from: a config's
   * seed, or the defaults; `unknown` when its policy workflow keeps no record of it (an older oz0's run).
   */
  source: Source;
  shares: Shares;
  /**
   * A13: where each field of its shares came from (`weight`, `maxPriority`, `limits.maxRunningCalls`,
   * `limits.servers.<server>.callsPerSecond`, …), a cap or rate a command took off included.
   */
  sources: Record<string, Source>;
  /** Its jobs running now. */
  jobs: number;
  /** Its calls in Temporal now, from its running jobs (the first {@link JOBS_LOOKED}): started, and queued. */
  calls: { running: number; queued: number; jobsLooked: number };
  /** What its limiter counts, across every node: running and waiting in line, by scope; none without caps or rates. */
  limiter?: LimiterStatus;
  /**
   * N4: its limiter is behind, in words: its workflow task has waited (busy, or no node serves the policy queue), or it
   * answered slowly. Its calls wait meanwhile (in their jobs, using no attempt); none fails for it.
   */
  limiterBehind?: string;
}

/** The tenants there are: those the config names, and those with a policy workflow. */
export async function knownTenants(client: Client, configured: readonly string[]): Promise<string[]> {
  const found = new Set(configured);
  const query = `WorkflowType = '${POLICY_WORKFLOW}' AND ExecutionStatus = 'Running'`;
  for await (const wf of client.workflow.list({ query })) {
    const tenant = wf.workflowId.slice('oz0-policy/'.length);
    if (tenant && tenant !== ALL_TENANTS) found.add(tenant);
  }
  return [...found].sort();
}

export async function tenantStatus(client: Client, target: PolicyTarget, tenant: string): Promise<TenantShown> {
  const running = `WorkflowType = '${JOB_WORKFLOW}' AND ExecutionStatus = 'Running' AND ${Oz0Tenant.name} = '${tenant}'`;
  const [{ state, origins }, [counted, behind], jobs, calls] = await Promise.all([
    readOrigins(target, tenant),
    limiterNow(client, tenant),
    client.workflow.count(running),
    callsInTemporal(client, running),
  ]);
  const seed = target.shareSeeds[tenant];
  const sources = shareSources(state, origins, seed);
  const all = new Set(Object.values(sources));
  return {
    tenant,
    version: state.version,
    source: all.has('set') ? 'set' : all.has('unknown') ? 'unknown' : all.has('config') ? 'config' : 'defaults',
    shares: sharesOf(state, seed),
    sources,
    jobs: jobs.count,
    calls,
    ...(counted ? { limiter: counted } : {}),
    ...(behind ? { limiterBehind: behind } : {}),
  };
}

/** N4: a limiter whose workflow task has waited this long, or that answers a query this slowly, is behind. */
const BEHIND_MS = 2000;

/** What a tenant's limiter counts, and whether it is behind (its pending workflow task's age, its answer's time). */
async function limiterNow(client: Client, tenant: string): Promise<[LimiterStatus | undefined, string | undefined]> {
  const asked = Date.now();
  const [counted, described] = await Promise.all([
    client.withDeadline(asked + 2 * BEHIND_MS, () => limiterStatus(client, tenant)).catch((err: Error) => err),
    client.workflow
      .getHandle(sharesWorkflowId(tenant))
      .describe()
      .catch(() => undefined),
  ]);
  const took = Date.now() - asked;
  const task = described?.status.name === 'RUNNING' ? described.raw.pendingWorkflowTask : undefined;
  const scheduled = optionalTsToMs(task?.scheduledTime);
  const waited = scheduled !== undefined ? asked - scheduled : 0;
  if (counted instanceof Error) {
    if (!described) throw counted;
    return [undefined, `its limiter did not answer (${counted.message})`];
  }
  if (waited >= BEHIND_MS)
    return [counted, `its limiter's workflow task has waited ${Math.round(waited / 100) / 10} s for a node`];
  if (took >= BEHIND_MS) return [counted, `its limiter took ${Math.round(took / 100) / 10} s to answer`];
  return [counted, undefined];
}

/** The calls of the first running jobs: started on a node, or still in Temporal's queue. */
async function callsInTemporal(client: Client, query: string): Promise<TenantShown['calls']> {
  const ids: string[] = [];
  for await (const wf of client.workflow.list({ query, pageSize: JOBS_LOOKED })) {
    ids.push(wf.workflowId);
    if (ids.length >= JOBS_LOOKED) break;
  }
  const { PENDING_ACTIVITY_STATE_STARTED, PENDING_ACTIVITY_STATE_SCHEDULED } =
    temporal.api.enums.v1.PendingActivityState;
  let started = 0;
  let queued = 0;
  await Promise.all(
    ids.map(async (id) => {
      const described = await client.workflow
        .getHandle(id)
        .describe()
        .catch(() => undefined);
      for (const a of described?.raw.pendingActivities ?? []) {
        if (a.activityType?.name !== 'callTool') continue;
        if (a.state === PENDING_ACTIVITY_STATE_STARTED) started++;
        else if (a.state === PENDING_ACTIVITY_STATE_SCHEDULED) queued++;
      }
    }),
  );
  return { running: started, queued, jobsLooked: ids.length };
}

/** What `oz0 tenant set` changes: each field given replaces the one in force; `null` takes a cap or rate off. */
export interface SharesChange {
  weight?: number;
  maxPriority?: number;
  maxRunningCalls?: number | null;
  callsPerSecond?: number | null;
  /** The cap and rate given are this server's (`tenants.<t>.limits.servers.<server>`), not the tenant's own. */
  server?: string;
}

/** A13: the fields of the shares a change names, as the policy workflow marks them set by a command. */
export function changedFields(change: SharesChange): string[] {
  const at = change.server ? `limits.servers.${change.server}` : 'limits';
  return [
    ...(change.weight !== undefined ? ['weight'] : []),
    ...(change.maxPriority !== undefined ? ['maxPriority'] : []),
    ...(['maxRunningCalls', 'callsPerSecond'] as const).filter((f) => change[f] !== undefined).map((f) => `${at}.${f}`),
  ];
}

/** The tenant's shares with the change made. */
export function changedShares(shares: Shares, change: SharesChange): Shares {
  const next: Shares = structuredClone(shares);
  if (change.weight !== undefined) next.weight = change.weight;
  if (change.maxPriority !== undefined) next.maxPriority = change.maxPriority;
  const servers = { ...(next.limits.servers ?? {}) };
  const limit: Limit = change.server ? { ...(servers[change.server] ?? {}) } : next.limits;
  for (const field of ['maxRunningCalls', 'callsPerSecond'] as const) {
    const value = change[field];
    if (value === null) delete limit[field];
    else if (value !== undefined) limit[field] = value;
  }
  if (change.server) {
    if (Object.keys(limit).length) servers[change.server] = limit;
    else delete servers[change.server];
  }
  if (Object.keys(servers).length) next.limits.servers = servers;
  else delete next.limits.servers;
  return next;
}

/**
 * F5: changes a tenant's shares durably (its policy workflow), then at once where they act: its weight in the shared
 * queues' config, its limits in its limiter. Nodes learn the change from its policy within a second and write the
 * weight on their own queues too.
 */
export async function setShares(
  client: Client,
  target: PolicyTarget,
  queues: { taskQueue: string; policyTaskQueue: string },
  tenant: string,
  change: SharesChange,
): Promise<{ version: number; shares: Shares }> {
  const current = sharesOf(await readPolicy(target, tenant), target.shareSeeds[tenant]);
  const shares = changedShares(current, change);
  const state = await changePolicy(target, tenant, setSharesUpdate, [shares, changedFields(change)]);
  await applyWeights(client, sharedQueues(queues), { [tenant]: shares.weight }, 'oz0 tenant set');
  await tellLimiter(client, tenant, state.version, shares);
  return { version: state.version, shares };
}
