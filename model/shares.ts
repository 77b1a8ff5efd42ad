/**
 * A tenant's share of the platform (SPEC F1-F5): its fairness weight, the highest priority its jobs may ask, its caps
 * and rates — and the pure rules that read them: the priority a job and its calls carry, which caps and rates a call
 * is under, and whether a node's slot may go to a tenant (F2). Shares are policy: they live in the tenant's policy
 * state (./schemas TenantState.shares), seeded from the config; the counting behind caps and rates is ./limiter.ts.
 * Pure: the workflow bundle imports it.
 */
import type { Priority } from '@temporalio/common';
import { SERVER_PATTERN } from './checks';

/** Temporal's priority keys run 1 (first) to 5 with the server's default `matching.priorityLevels`. */
export const PRIORITY_LEVELS = 5;
/** What a job without `priority` gets: Temporal's own default with five levels. */
export const DEFAULT_PRIORITY = 3;
/** F4: the highest priority (smallest number) a tenant's jobs may ask unless its shares say otherwise. */
export const DEFAULT_MAX_PRIORITY = DEFAULT_PRIORITY;
/** F1: a tenant's fairness weight unless its shares say otherwise; Temporal clamps weights to [0.001, 1000]. */
export const DEFAULT_WEIGHT = 1;
export const MIN_WEIGHT = 0.001;
export const MAX_WEIGHT = 1000;
/** F3: the fastest rate a cap may set; a rate spaces calls at least 1/rate apart, so past this it spaces nothing. */
export const MAX_CALLS_PER_SECOND = 1000;
export const MAX_RUNNING_CALLS = 1_000_000;

/**
 * The fairness key of what is the platform's own rather than a tenant's (the all-tenants policy workflow, a node's
 * probes): `*`, which no tenant's name can be.
 */
export const PLATFORM_KEY = '*';

/** F3: a cap on running calls and a rate of new ones, for a tenant or for one server of it. */
export interface Limit {
  maxRunningCalls?: number;
  callsPerSecond?: number;
}

/** F3: a tenant's own limits, and its limits per server (to spare the service behind it). */
export interface Limits extends Limit {
  servers?: Record<string, Limit>;
}

/** A tenant's share of the platform, as its policy state keeps it. */
export interface Shares {
  /** F1: its weight in Temporal's fair dispatch, against the other tenants' (default 1). */
  weight: number;
  /** F4: the highest priority (1 first … 5) its jobs may ask. */
  maxPriority: number;
  limits: Limits;
}

export function defaultShares(): Shares {
  return { weight: DEFAULT_WEIGHT, maxPriority: DEFAULT_MAX_PRIORITY, limits: {} };
}

function limitProblem(value: unknown, at: string): string | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value))
    return `${at} is { maxRunningCalls?, callsPerSecond? }`;
  const { maxRunningCalls, callsPerSecond, servers, ...rest } = value as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length) return `${at} has no field ${extra.map((k) => `"${k}"`).join(', ')}`;
  if (maxRunningCalls !== undefined) {
    const ok = typeof maxRunningCalls === 'number' && Number.isInteger(maxRunningCalls);
    if (!ok || maxRunningCalls < 1 || maxRunningCalls > MAX_RUNNING_CALLS)
      return `${at}.maxRunningCalls is a whole number from 1 to ${MAX_RUNNING_CALLS}`;
  }
  if (callsPerSecond !== undefined) {
    const ok = typeof callsPerSecond === 'number' && Number.isFinite(callsPerSecond);
    if (!ok || callsPerSecond <= 0 || callsPerSecond > MAX_CALLS_PER_SECOND)
      return `${at}.callsPerSecond is a number above 0, at most ${MAX_CALLS_PER_SECOND}`;
  }
  if (servers === undefined) return undefined;
  if (at !== 'limits') return `${at} has no field "servers"`;
  if (!servers || typeof servers !== 'object' || Array.isArray(servers)) return 'limits.servers maps servers to limits';
  for (const [server, limit] of Object.entries(servers)) {
    if (!SERVER_PATTERN.test(server)) return `limits.servers: "${server}" is not a server's name`;
    const problem = limitProblem(limit, `limits.servers.${server}`);
    if (problem) return problem;
  }
  return undefined;
}

/**
 * What is wrong with a tenant's shares, if anything: the policy workflow's validator (zod stays out of the bundle);
 * ./schemas SharesSchema says the same with paths, for the config and the node (a unit test holds them together).
 */
export function sharesProblem(value: unknown): string | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return 'shares are { weight, maxPriority, limits }';
  const { weight, maxPriority, limits, ...rest } = value as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length) return `shares have no field ${extra.map((k) => `"${k}"`).join(', ')}`;
  if (typeof weight !== 'number' || !Number.isFinite(weight) || weight < MIN_WEIGHT || weight > MAX_WEIGHT)
    return `weight is a number from ${MIN_WEIGHT} to ${MAX_WEIGHT}`;
  if (typeof maxPriority !== 'number' || !Number.isInteger(maxPriority) || maxPriority < 1 || maxPriority > 5)
    return 'maxPriority is a whole number from 1 (first) to 5';
  return limitProblem(limits, 'limits');
}

/** The workflow that counts a tenant's running calls and paces its rates, across every node (./limiter.ts). */
export const SHARES_WORKFLOW = 'tenantShares';

export function sharesWorkflowId(tenant: string): string {
  return `oz0-shares/${tenant}`;
}

/** A cap or rate is kept per scope: the tenant's own (`*`), or one server's of it (`server:<name>`). */
export const TENANT_SCOPE = '*';

export function serverScope(server: string): string {
  return `server:${server}`;
}

/** The caps and rates a call of `server` is under, by scope; empty when its tenant has none that reach it. */
export function limitsOf(
  limits: Limits,
  server: string,
): { caps: Record<string, number>; rates: Record<string, number> } {
  const caps: Record<string, number> = {};
  const rates: Record<string, number> = {};
  const add = (scope: string, limit: Limit | undefined) => {
    if (limit?.maxRunningCalls !== undefined) caps[scope] = limit.maxRunningCalls;
    if (limit?.callsPerSecond !== undefined) rates[scope] = limit.callsPerSecond;
  };
  add(TENANT_SCOPE, limits);
  add(serverScope(server), limits.servers?.[server]);
  return { caps, rates };
}

/** Whether a tenant has any cap or rate at all (else its calls never ask its limiter). */
export function hasLimits(limits: Limits): boolean {
  const any = (l: Limit | undefined) => l?.maxRunningCalls !== undefined || l?.callsPerSecond !== undefined;
  return any(limits) || Object.values(limits.servers ?? {}).some(any);
}

/**
 * F1, F4: the priority a job is started with: its tenant as Temporal's fairness key (its workflow tasks, and every
 * activity it schedules, which inherit it), and the priority its spec asks, if any. The weight is not here: Temporal's
 * task-queue config carries each tenant's (its overrides win over a task's own), so a change reaches tasks scheduled
 * after it whoever started the job.
 */
export function jobPriority(spec: { tenant: string; priority?: number }): Priority {
  return { fairnessKey: spec.tenant, ...(spec.priority !== undefined ? { priorityKey: spec.priority } : {}) };
}

/**
 * F4: a live session's calls go one step ahead of their job's (an agent waits on each), at most to the first; a
 * scripted call keeps its job's.
 */
export function liveCallPriority(jobPriority: number | undefined): number {
  return stepAhead(jobPriority);
}

/**
 * F3: a call whose turn came in its tenant's line is scheduled again one step ahead of its own priority (at most to
 * the first): a permit is held for it, and behind the calls of its tenant not yet in line (a flood's first attempts)
 * it would keep that permit idle. At most a cap's worth of such calls are due at once.
 */
export function grantedCallPriority(priority: number | undefined): number {
  return stepAhead(priority);
}

/** One priority step ahead of `priority` (Temporal's default when none), at most to the first. */
function stepAhead(priority: number | undefined): number {
  return Math.max(1, (priority || DEFAULT_PRIORITY) - 1);
}

/** F4: why a job's `priority` is refused for its tenant; undefined when it may have it. */
export function priorityProblem(priority: number | undefined, maxPriority: number): string | undefined {
  if (priority === undefined || priority >= maxPriority) return undefined;
  return `${priority} is ahead of what this tenant may ask: its highest is ${maxPriority} (1 is first; oz0 tenant set --max-priority)`;
}

/**
 * F2: how many of a node's slots are kept for tenants under their share: 5 % of them, at least 1; none on a node of
 * fewer than 4, where one kept slot would be a quarter or more of what a lone tenant may use.
 */
export function defaultReserve(slots: number): number {
  return slots < 4 ? 0 : Math.max(1, Math.round(slots * 0.05));
}

/** F2: what a node knows when a call of `tenant` asks for the slot it was given. */
export interface SlotAsk {
  slots: number;
  reserve: number;
  /** Activities running on the node's queue now, this one included. */
  busy: number;
  tenant: string;
  /** Calls of each tenant running on the queue now, this one not included. */
  running: ReadonlyMap<string, number>;
  weightOf(tenant: string): number;
}

/**
 * F2: fairness counts what already runs. A call keeps the slot it was given while the node still has `reserve` free
 * slots after it, or while its tenant runs fewer calls there than its weighted share of the rest (among the tenants
 * running there and itself). Otherwise it gives the slot back and waits: so one tenant's long calls never hold a
 * node's last slots while another tenant's call waits for one.
 */
export function mayTakeSlot(ask: SlotAsk): { ok: true } | { ok: false; share: number; runs: number } {
  const free = ask.slots - ask.busy;
  if (free >= ask.reserve) return { ok: true };
  const tenants = new Set([...ask.running.keys()].filter((t) => (ask.running.get(t) ?? 0) > 0));
  tenants.add(ask.tenant);
  const total = [...tenants].reduce((sum, t) => sum + ask.weightOf(t), 0);
  const share = ((ask.slots - ask.reserve) * ask.weightOf(ask.tenant)) / total;
  const runs = ask.running.get(ask.tenant) ?? 0;
  return runs < share ? { ok: true } : { ok: false, share, runs };
}
