/**
 * Where a tenant's durable policy and shares came from (SPEC A13): the config that seeded its policy workflow the
 * first time it started, or a command (`oz0 policy set`, `oz0 tenant set`, their Updates from any client). The workflow
 * keeps, beside its state, which fields a command set; every other field is its seed's. And what a node says at start:
 * each field where its config differs from what is durable, with the command that would change it. A config only
 * seeds: it is never applied over what is durable, so an operator's command wins. Pure: the workflow bundle imports it.
 */
import { SERVER_PATTERN } from './checks';
import type { DECISIONS } from './checks';
import type { Limit, Shares } from './shares';
import { defaultShares } from './shares';

/** What of a tenant's state has a source: its policy and its shares (./schemas TenantState, which validates it). */
export interface Seeded {
  policy: Record<string, (typeof DECISIONS)[number]>;
  shares?: Shares;
}

/** Where one field came from; `unknown`: kept by an oz0 from before origins were recorded (a run it continued). */
export type Source = 'config' | 'set' | 'defaults' | 'unknown';

/** A13: what of a tenant's state a command set; every other field is its config seed's (or the default). */
export interface Origins {
  /** Tool patterns whose decision a command set. */
  policy: string[];
  /** Fields of its shares a command set, by path ({@link shareFields}): `weight`, `limits.callsPerSecond`, … */
  shares: string[];
  /** false: its workflow continued a run that kept no origins (an older oz0's): a field not named may be either. */
  complete: boolean;
}

/** The origins of a workflow's first run: everything is its seed's. */
export function seededOrigins(): Origins {
  return { policy: [], shares: [], complete: true };
}

const LIMIT_FIELDS = ['maxRunningCalls', 'callsPerSecond'] as const;
const SHARE_FIELD = new RegExp(
  `^(weight|maxPriority|limits(\\.servers\\.${SERVER_PATTERN.source.slice(1, -1)})?\\.(${LIMIT_FIELDS.join('|')}))$`,
);

/**
 * A tenant's shares field by field: `weight`, `maxPriority`, `limits.<field>`, `limits.servers.<server>.<field>`. A
 * cap or rate it has none of is absent.
 */
export function shareFields(shares: Shares): Record<string, number> {
  const fields: Record<string, number> = { weight: shares.weight, maxPriority: shares.maxPriority };
  const add = (at: string, limit: Limit | undefined) => {
    for (const f of LIMIT_FIELDS) if (limit?.[f] !== undefined) fields[`${at}.${f}`] = limit[f];
  };
  add('limits', shares.limits);
  for (const [server, limit] of Object.entries(shares.limits.servers ?? {})) add(`limits.servers.${server}`, limit);
  return fields;
}

/** The fields whose value differs between two shares (a cap or rate taken off included). */
export function changedShareFields(before: Shares, after: Shares): string[] {
  const [a, b] = [shareFields(before), shareFields(after)];
  return [...new Set([...Object.keys(a), ...Object.keys(b)])].filter((f) => a[f] !== b[f]).sort();
}

/** What is wrong with the fields a `setShares` Update says its caller named (the workflow's validator). */
export function shareFieldsProblem(fields: unknown): string | undefined {
  if (fields === undefined) return undefined;
  const ok = Array.isArray(fields) && fields.length <= 1000;
  if (!ok || !fields.every((f) => typeof f === 'string' && SHARE_FIELD.test(f)))
    return 'the fields named are paths of shares: weight, maxPriority, limits[.servers.<server>].maxRunningCalls|callsPerSecond';
  return undefined;
}

/** What is wrong with origins as a policy workflow answers them, if anything (./schemas OriginsSchema). */
export function originsProblem(value: unknown): string | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return 'origins are { policy, shares, complete }';
  const { policy, shares, complete } = value as Record<string, unknown>;
  if (!Array.isArray(policy) || !policy.every((p) => typeof p === 'string')) return "origins' policy is a list";
  if (typeof complete !== 'boolean') return "origins' complete is true or false";
  return shares === undefined ? "origins' shares is a list" : shareFieldsProblem(shares);
}

/** Adds what a command set to the origins (once each). */
export function setBy(origins: Origins, kind: 'policy' | 'shares', fields: readonly string[]): void {
  origins[kind] = [...new Set([...origins[kind], ...fields])].sort();
}

function sourceOf(origins: Origins | undefined, kind: 'policy' | 'shares', field: string): Source {
  if (!origins) return 'unknown';
  if (origins[kind].includes(field)) return 'set';
  return origins.complete ? 'config' : 'unknown';
}

/** A13: where each pattern of a tenant's policy came from. */
export function policySources(state: Seeded, origins: Origins | undefined): Record<string, Source> {
  return Object.fromEntries(Object.keys(state.policy).map((p) => [p, sourceOf(origins, 'policy', p)]));
}

/**
 * A13: where each field of a tenant's shares came from, those in force and those a command took off. Shares its state
 * has none of are the config's seed, as each node reads it, else the defaults.
 */
export function shareSources(
  state: Pick<Seeded, 'shares'>,
  origins: Origins | undefined,
  seed: Shares | undefined,
): Record<string, Source> {
  if (!state.shares) {
    const fields = Object.keys(shareFields(seed ?? defaultShares()));
    return Object.fromEntries(fields.map((f) => [f, seed ? 'config' : 'defaults']));
  }
  const fields = new Set([...Object.keys(shareFields(state.shares)), ...(origins?.shares ?? [])]);
  return Object.fromEntries([...fields].sort().map((f) => [f, sourceOf(origins, 'shares', f)]));
}

const SOURCE_SAID: Record<Source, string> = {
  set: 'set by a command',
  config: 'from the config that first seeded it',
  defaults: 'the default',
  unknown: 'from before oz0 recorded where it came from',
};

/**
 * A13: each field where a tenant's config differs from its durable policy and shares, in a sentence that names the
 * field, both values, where the durable one came from, and the command that would change it. Empty when they agree.
 * Shares the durable state has none of are the config's on each node: nothing differs there.
 */
export function configDifferences(
  tenant: string,
  config: Seeded,
  state: Seeded,
  origins: Origins | undefined,
): string[] {
  const lines: string[] = [];
  const durable = 'in its durable policy';
  const sources = policySources(state, origins);
  for (const [pattern, decision] of Object.entries(config.policy)) {
    const has = state.policy[pattern];
    if (has === decision) continue;
    const now = has ? `${has} ${durable} (${SOURCE_SAID[sources[pattern]]})` : `not set ${durable}`;
    lines.push(
      `tenant ${tenant}: policy ${pattern} is ${decision} in the config but ${now}, which is what runs; ` +
        `to change it: oz0 policy set ${tenant} ${shellWord(pattern)} ${decision}`,
    );
  }
  for (const [pattern, decision] of Object.entries(state.policy)) {
    if (Object.hasOwn(config.policy, pattern)) continue;
    lines.push(
      `tenant ${tenant}: policy ${pattern} is ${decision} ${durable} (${SOURCE_SAID[sources[pattern]]}), which the ` +
        `config does not name; it stays (no command takes a pattern off; oz0 policy set ${tenant} ` +
        `${shellWord(pattern)} … changes it)`,
    );
  }
  if (!state.shares) return lines;
  const wanted = shareFields(config.shares ?? defaultShares());
  const has = shareFields(state.shares);
  for (const field of changedShareFields(config.shares ?? defaultShares(), state.shares)) {
    const [want, now] = [wanted[field], has[field]];
    lines.push(
      `tenant ${tenant}: ${configField(field)} is ${valueText(want)} in the config but ${valueText(now)} ${durable} ` +
        `(${SOURCE_SAID[sourceOf(origins, 'shares', field)]}), which is what runs; to change it: ${shareCommand(tenant, field, want)}`,
    );
  }
  return lines;
}

/** A share field's name in the config: `tenants.<t>.fairness.weight`, `tenants.<t>.limits.callsPerSecond`, … */
function configField(field: string): string {
  return field.startsWith('limits.') ? field : `fairness.${field}`;
}

function valueText(value: number | undefined): string {
  return value === undefined ? 'none' : String(value);
}

/** The `oz0 tenant set` that sets one share field to `value` (none: takes a cap or rate off). */
export function shareCommand(tenant: string, field: string, value: number | undefined): string {
  const v = valueText(value);
  if (field === 'weight') return `oz0 tenant set ${tenant} --weight ${v}`;
  if (field === 'maxPriority') return `oz0 tenant set ${tenant} --max-priority ${v}`;
  const [, , server, limit] = SHARE_FIELD.exec(field) ?? [];
  const flag = limit === 'maxRunningCalls' ? '--max-running' : '--rate';
  return `oz0 tenant set ${tenant}${server ? ` --server ${server.slice('.servers.'.length)}` : ''} ${flag} ${v}`;
}

/** A pattern as a shell takes it: quoted where a `*` would glob. */
function shellWord(pattern: string): string {
  return pattern.includes('*') ? `'${pattern}'` : pattern;
}
