/**
 * One long-running workflow per tenant keeps its policy, kill switches and approvals (A3): durable in
 * Temporal, visible in the UI, changed only through updates, read through a query. `oz0-policy/*` holds the
 * kill switches thrown for every tenant.
 */
import {
  allHandlersFinished,
  condition,
  continueAsNew,
  defineQuery,
  defineUpdate,
  setHandler,
  workflowInfo,
} from '@temporalio/workflow';
import type { Approval, Decision, PolicyInput, TenantState } from '../common/schemas';
import { approvalProblem, decisionProblem, patternProblem, serverNameProblem } from './checks';
import { emptyState } from './policy-rules';

export const policyStateQuery = defineQuery<TenantState>('state');
export const setPolicyUpdate = defineUpdate<TenantState, [string, Decision]>('setPolicy');
export const killUpdate = defineUpdate<TenantState, [string]>('kill');
export const reviveUpdate = defineUpdate<TenantState, [string]>('revive');
export const approveUpdate = defineUpdate<TenantState, [string, Approval]>('approve');
export const revokeUpdate = defineUpdate<TenantState, [string]>('revoke');

/** Changes kept in one run's history before it continues as new. */
const CHANGES_PER_RUN = 500;

export async function tenantPolicy(input: PolicyInput): Promise<void> {
  const state: TenantState = input.state ?? emptyState(input.seed);
  let changes = 0;
  const change = (apply: () => void) => () => {
    apply();
    state.version++;
    changes++;
    return state;
  };
  /** Update validators: a bad argument is refused before it reaches the history, with what is wrong. */
  const check = (...problems: (string | undefined)[]) => {
    const found = problems.filter(Boolean);
    if (found.length) throw new Error(found.join('; '));
  };

  setHandler(policyStateQuery, () => state, {
    description: "the tenant's policy: decisions by tool pattern, kill switches, approved listings, version",
  });
  setHandler(setPolicyUpdate, (pattern, decision) => change(() => (state.policy[pattern] = decision))(), {
    validator: (pattern, decision) => {
      check(patternProblem(pattern), decisionProblem(decision));
    },
    description: 'A1: sets allow, deny or ask for a tool pattern',
  });
  setHandler(killUpdate, (tool) => change(() => (state.kills = [...new Set([...state.kills, tool])]))(), {
    validator: (tool) => check(patternProblem(tool)),
    description: "C5: throws a tool pattern's kill switch: its running calls stop, new ones are refused",
  });
  setHandler(reviveUpdate, (tool) => change(() => (state.kills = state.kills.filter((k) => k !== tool)))(), {
    validator: (tool) => check(patternProblem(tool)),
    description: "C5: takes a tool pattern's kill switch off",
  });
  setHandler(approveUpdate, (server, approval) => change(() => (state.approvals[server] = approval))(), {
    validator: (server, approval) => {
      check(serverNameProblem(server), approvalProblem(approval));
    },
    description: "A2: approves a server's listing, pinned to its digest",
  });
  setHandler(revokeUpdate, (server) => change(() => delete state.approvals[server])(), {
    validator: (server) => check(serverNameProblem(server)),
    description: "A2: takes a server's approval back",
  });

  // The history stays short: after enough changes (or when Temporal says so) the state moves to a new run.
  await condition(() => changes >= CHANGES_PER_RUN || workflowInfo().continueAsNewSuggested);
  await condition(allHandlersFinished);
  await continueAsNew<typeof tenantPolicy>({ tenant: input.tenant, state });
}
