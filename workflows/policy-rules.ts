/**
 * A tenant's policy, kill switches and approvals (SPEC A1-A3, C5), and the pure rules that read them.
 * Shared by the policy workflow (which keeps the state), the node (which enforces it) and the CLI.
 */
import { canonicalize } from 'json-canonicalize';
import { sha256 } from '@noble/hashes/sha256';
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils';
import { NAME_PATTERN, TOOL_PATTERN } from './definitions';

export const DECISIONS = ['allow', 'deny', 'ask'] as const;
export type Decision = (typeof DECISIONS)[number];

const SERVER_FUNCTION_WILDCARD = /^[A-Za-z0-9_-]+\.\*$/;
const SERVER_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const DIGEST = /^[0-9a-f]{64}$/;

/** What is wrong with a tool pattern (`server.function`, `server.*` or `*`), if anything. */
export function patternProblem(p: unknown): string | undefined {
  return typeof p === 'string' && (p === '*' || SERVER_FUNCTION_WILDCARD.test(p) || TOOL_PATTERN.test(p))
    ? undefined
    : 'a tool pattern is "server.function", "server.*" or "*"';
}

export function decisionProblem(d: unknown): string | undefined {
  return (DECISIONS as readonly unknown[]).includes(d) ? undefined : `a decision is one of ${DECISIONS.join(', ')}`;
}

export function tenantNameProblem(t: unknown): string | undefined {
  return typeof t === 'string' && NAME_PATTERN.test(t)
    ? undefined
    : 'a tenant is 1-64 letters, digits, "_", "." or "-"';
}

export function serverNameProblem(s: unknown): string | undefined {
  return typeof s === 'string' && SERVER_NAME.test(s) ? undefined : 'a server name is 1-64 letters, digits, "_" or "-"';
}

/** An approval pins a server's listing: its digest, and each tool's own digest to say what changed. */
export interface Approval {
  digest: string;
  tools: Record<string, string>;
  approvedAt: string;
}

export function approvalProblem(a: unknown): string | undefined {
  if (!a || typeof a !== 'object' || Array.isArray(a)) return 'an approval is { digest, tools, approvedAt }';
  const { digest, tools, approvedAt, ...rest } = a as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length) return `an approval has no field ${extra.map((k) => `"${k}"`).join(', ')}`;
  if (typeof digest !== 'string' || !DIGEST.test(digest)) return "an approval's digest is 64 hex digits";
  if (!tools || typeof tools !== 'object' || Array.isArray(tools)) return "an approval's tools map names to digests";
  for (const [name, d] of Object.entries(tools))
    if (typeof d !== 'string' || !DIGEST.test(d)) return `the digest of tool "${name}" is not 64 hex digits`;
  if (typeof approvedAt !== 'string') return "an approval's approvedAt is a date string";
  return undefined;
}

export interface TenantState {
  /** Grows by one with every change: a node can tell a fresh read from a stale one. */
  version: number;
  policy: Record<string, Decision>;
  /** Tools (or `server.*`, `*`) whose kill switch is on. */
  kills: string[];
  approvals: Record<string, Approval>;
}

export function emptyState(policy: Record<string, Decision> = {}): TenantState {
  return { version: 0, policy: { ...policy }, kills: [], approvals: {} };
}

/** Workflow id of a tenant's policy workflow; `*` holds the kill switches thrown for all tenants. */
export function policyWorkflowId(tenant: string | '*'): string {
  return `oz0-policy/${tenant}`;
}

export const POLICY_WORKFLOW = 'tenantPolicy';
export const ALL_TENANTS = '*';

export function matches(pattern: string, tool: string): boolean {
  if (pattern === '*') return true;
  if (pattern.endsWith('.*')) return tool.startsWith(pattern.slice(0, -1));
  return pattern === tool;
}

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
  const server = tool.slice(0, tool.indexOf('.'));
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

export type Verdict = { allowed: true; approved: boolean } | { allowed: false; outcome: 'refused'; why: string };

/**
 * A1-A2, C5: may this call run now? A kill switch or `deny` refuses; a remote server always needs its current
 * listing approved; `ask` refuses until the server's current listing is approved.
 */
export function verdict(input: {
  state: TenantState;
  globalKills: readonly string[];
  tool: string;
  remote: boolean;
  listing?: { digest: string; tools: Approval['tools'] };
}): Verdict {
  const { state, tool, remote, listing } = input;
  const kill = killedBy([...input.globalKills, ...state.kills], tool);
  if (kill)
    return {
      allowed: false,
      outcome: 'refused',
      why: `killed: the kill switch for ${kill} is on (oz0 tool revive ${kill})`,
    };
  const { decision, pattern } = decisionFor(state.policy, tool, remote);
  if (decision === 'deny')
    return { allowed: false, outcome: 'refused', why: `denied by the tenant's policy (${pattern}: deny)` };
  const server = tool.slice(0, tool.indexOf('.'));
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
  return { allowed: true, approved };
}

/** A2: the digest of a `tools/list` answer (RFC 8785 + SHA-256), and of each tool in it. */
export function listingDigest(tools: readonly ({ name: string } & Record<string, unknown>)[]): {
  digest: string;
  tools: Approval['tools'];
} {
  const hash = (value: unknown) => bytesToHex(sha256(utf8ToBytes(canonicalize(value))));
  return { digest: hash({ tools }), tools: Object.fromEntries(tools.map((t) => [t.name, hash(t)])) };
}
