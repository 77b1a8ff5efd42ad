/**
 * A tenant's policy, kill switches and approvals (SPEC A1-A3, C5), and the pure rules that read them.
 * Shared by the policy workflow (which keeps the state), the node (which enforces it) and the CLI.
 */
import { canonicalize } from 'json-canonicalize';
import { sha256 } from '@noble/hashes/sha256';
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils';
import type { Approval, Decision, TenantState } from './schemas';
import { matches, splitTool } from './checks';
import { defaultShares } from './shares';
import type { Shares } from './shares';

export { matches };

/** A tenant's first state: its config's policy and shares (F5), as its workflow starts for the first time. */
export function emptyState(policy: Record<string, Decision> = {}, shares?: Shares): TenantState {
  return { version: 0, policy: { ...policy }, kills: [], approvals: {}, ...(shares ? { shares } : {}) };
}

/** F1-F5: a tenant's shares: its state's, else the config's seed, else the defaults. */
export function sharesOf(state: Pick<TenantState, 'shares'> | undefined, seed?: Shares): Shares {
  return state?.shares ?? seed ?? defaultShares();
}

/** Workflow id of a tenant's policy workflow; `*` holds the kill switches thrown for all tenants. */
export function policyWorkflowId(tenant: string | '*'): string {
  return `oz0-policy/${tenant}`;
}

export const POLICY_WORKFLOW = 'tenantPolicy';
export const ALL_TENANTS = '*';

/** The kill switch that stops `tool`, if any, from the tenant's own and the all-tenants switches. */
export function killedBy(kills: readonly string[], tool: string): string | undefined {
  return kills.find((pattern) => matches(pattern, tool));
}

/** A1: the most specific pattern wins (`server.function` over `server.*` over `*`); else the kind's default. */
export function decisionFor(
  policy: Record<string, Decision>,
  tool: string,
  remote: boolean,
): { decision: Decision; pattern: string } {
  const { server } = splitTool(tool);
  for (const pattern of [tool, `${server}.*`, '*']) {
    const decision = policy[pattern];
    if (decision) return { decision, pattern };
  }
  return { decision: remote ? 'ask' : 'allow', pattern: remote ? '(default for remote servers)' : '(default)' };
}

/** What changed between an approved listing and the current one, in words; empty when nothing did. */
export function listingChanges(approved: Approval['tools'], current: Approval['tools']): string[] {
  const changes: string[] = [];
  for (const name of Object.keys(current)) {
    if (!(name in approved)) changes.push(`${name} added`);
    else if (approved[name] !== current[name]) changes.push(`${name} changed`);
  }
  for (const name of Object.keys(approved)) if (!(name in current)) changes.push(`${name} removed`);
  return changes.sort();
}

export type Verdict =
  | {
      allowed: true;
      approved: boolean;
      /** A4: the pattern whose verdict is `confirm`: the call runs only once a person said yes to it. */
      confirm?: string;
    }
  | { allowed: false; outcome: 'refused'; why: string };

/**
 * A1-A2, A4, C5: may this call run now? A kill switch or `deny` refuses; a remote server always needs its current
 * listing approved; `ask` refuses until the server's current listing is approved; `confirm` allows it once a person
 * said yes (the verdict names the pattern, and the caller asks).
 */
export function verdict(input: {
  state: TenantState;
  globalKills: readonly string[];
  tool: string;
  remote: boolean;
  listing?: { digest: string; tools: Approval['tools'] };
}): Verdict {
  const { state, tool, remote, listing } = input;
  const kill = killedBy(input.globalKills, tool) ?? killedBy(state.kills, tool);
  if (kill)
    return {
      allowed: false,
      outcome: 'refused',
      why: `killed: the kill switch for ${kill} is on (oz0 tool revive ${kill})`,
    };
  const { decision, pattern } = decisionFor(state.policy, tool, remote);
  if (decision === 'deny')
    return { allowed: false, outcome: 'refused', why: `denied by the tenant's policy (${pattern}: deny)` };
  const { server } = splitTool(tool);
  const approval = state.approvals[server];
  const approved = !!approval && !!listing && approval.digest === listing.digest;
  if ((remote || decision === 'ask') && !approved) {
    if (!approval)
      return {
        allowed: false,
        outcome: 'refused',
        why: `needs approval: nobody approved ${server}'s listing (oz0 policy approve)`,
      };
    const changes = listing ? listingChanges(approval.tools, listing.tools) : [];
    return {
      allowed: false,
      outcome: 'refused',
      why: `needs approval: ${server}'s listing changed since it was approved (${changes.join(', ') || 'digest differs'})`,
    };
  }
  return { allowed: true, approved, ...(decision === 'confirm' ? { confirm: pattern } : {}) };
}

/** A2: the digest of a `tools/list` answer (RFC 8785 + SHA-256), and of each tool in it. */
export function listingDigest(tools: readonly ({ name: string } & Record<string, unknown>)[]): {
  digest: string;
  tools: Approval['tools'];
} {
  const hash = (value: unknown) => bytesToHex(sha256(utf8ToBytes(canonicalize(value))));
  return { digest: hash({ tools }), tools: Object.fromEntries(tools.map((t) => [t.name, hash(t)])) };
}
