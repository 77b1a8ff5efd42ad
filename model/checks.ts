/**
 * The pure rules of oz0's names: tools, tool patterns, tenants, servers, decisions and approvals. The policy
 * workflow's update validators use them as they are (no zod in the workflow bundle); ./schemas wraps the same
 * functions in zod for every other edge, so the two can never disagree.
 */

/** `<server>.<function>`: a server name has no dot, a function name may. */
export const TOOL_PATTERN = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_.:/-]+$/;
/** A tenant's name. */
export const TENANT_PATTERN = /^[A-Za-z0-9_.-]{1,64}$/;
/** A server's name in the config: no dot, so `<server>.<function>` splits at the first one. */
export const SERVER_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const SERVER_WILDCARD = /^[A-Za-z0-9_-]+\.\*$/;
const DIGEST = /^[0-9a-f]{64}$/;

/** A1, A4: a tenant's verdict for a tool pattern; `confirm` makes each call wait for a person's yes. */
export const DECISIONS = ['allow', 'deny', 'ask', 'confirm'] as const;

/** A tool's server and function: `ledger.charge` → `ledger`, `charge` (a function name may hold dots). */
export function splitTool(tool: string): { server: string; fn: string } {
  const dot = tool.indexOf('.');
  return { server: tool.slice(0, dot), fn: tool.slice(dot + 1) };
}

export function toolProblem(t: unknown): string | undefined {
  return typeof t === 'string' && TOOL_PATTERN.test(t) && t.length <= 200
    ? undefined
    : 'a tool is "<server>.<function>", e.g. "ledger.charge"';
}

/** What is wrong with a tool pattern (`server.function`, `server.*` or `*`), if anything. */
export function patternProblem(p: unknown): string | undefined {
  return typeof p === 'string' && (p === '*' || SERVER_WILDCARD.test(p) || TOOL_PATTERN.test(p))
    ? undefined
    : 'a tool pattern is "server.function", "server.*" or "*"';
}

export function decisionProblem(d: unknown): string | undefined {
  return (DECISIONS as readonly unknown[]).includes(d) ? undefined : `a decision is one of ${DECISIONS.join(', ')}`;
}

export function tenantNameProblem(t: unknown): string | undefined {
  return typeof t === 'string' && TENANT_PATTERN.test(t)
    ? undefined
    : 'a tenant is 1-64 letters, digits, "_", "." or "-"';
}

export function serverNameProblem(s: unknown): string | undefined {
  return typeof s === 'string' && SERVER_PATTERN.test(s)
    ? undefined
    : 'a server name is 1-64 letters, digits, "_" or "-"';
}

/** An approval pins a server's listing: `{ digest, tools, approvedAt }`, digests in hex. */
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

/** A4: what is wrong with a question a node asks a policy workflow to watch, if anything. */
export function watchedQuestionProblem(q: unknown): string | undefined {
  if (!q || typeof q !== 'object' || Array.isArray(q)) return 'a question is { jobId, key, tool, until }';
  const { jobId, key, tool, until, ...rest } = q as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length) return `a question has no field ${extra.map((k) => `"${k}"`).join(', ')}`;
  if (typeof jobId !== 'string' || !jobId || jobId.length > 200) return "a question's jobId is 1-200 characters";
  if (typeof key !== 'string' || !key || key.length > 1000) return "a question's key is 1-1000 characters";
  if (typeof until !== 'number' || !Number.isFinite(until)) return "a question's until is a time in ms";
  return toolProblem(tool);
}

/** N4: the most asks of one kind a node's batch carries (common/update-batcher.ts MAX_BATCH, with room). */
export const MAX_ASKS = 500;

/** What is wrong with a batch of asks as a whole (each ask is checked on its own): a list of at most MAX_ASKS. */
export function batchProblem(asks: unknown): string | undefined {
  if (!Array.isArray(asks) || asks.length === 0 || asks.length > MAX_ASKS)
    return `a batch is a list of 1 to ${MAX_ASKS} asks`;
  return undefined;
}

/** Whether a tool pattern (`server.function`, `server.*` or `*`) covers a tool. */
export function matches(pattern: string, tool: string): boolean {
  if (pattern === '*') return true;
  if (pattern.endsWith('.*')) return tool.startsWith(pattern.slice(0, -1));
  return pattern === tool;
}

export function matchesAny(patterns: readonly string[], tool: string): boolean {
  return patterns.some((p) => matches(p, tool));
}

const CALL_ID = /^[A-Za-z0-9_.:@/-]{1,128}$/;
const SESSION = /^s[1-9][0-9]{0,8}$/;

/**
 * What is wrong with a live session Update's input, if anything: any Temporal client can send one (H9), so the
 * workflow's validators check it before it reaches the history.
 */
export function sessionInputProblem(input: unknown, isCall: boolean): string | undefined {
  if (!input || typeof input !== 'object' || Array.isArray(input)) return 'the input is an object';
  const i = input as Record<string, unknown>;
  if (typeof i.session !== 'string' || !SESSION.test(i.session)) return 'session is "s<n>", e.g. "s1"';
  if (typeof i.run !== 'number' || !Number.isInteger(i.run) || i.run < 1) return 'run is a whole number from 1';
  if ('callId' in i || isCall) {
    if (typeof i.callId !== 'string' || !CALL_ID.test(i.callId)) return 'callId is 1-128 letters, digits or _.:@/-';
  }
  if ('reason' in i && i.reason !== undefined && (typeof i.reason !== 'string' || i.reason.length > 1000)) {
    return 'reason is a string of at most 1000 characters';
  }
  if (!isCall) return undefined;
  const toolIssue = toolProblem(i.tool);
  if (toolIssue) return toolIssue;
  if (i.args !== undefined && (!i.args || typeof i.args !== 'object' || Array.isArray(i.args))) {
    return 'args is an object';
  }
  if (i.progress !== undefined && typeof i.progress !== 'boolean') return 'progress is true or false';
  return undefined;
}

/** A5: what is wrong with an answer to a waiting call, if anything: any Temporal client can send one. */
export function answerProblem(input: unknown): string | undefined {
  if (!input || typeof input !== 'object' || Array.isArray(input))
    return 'an answer is { call?, approve, by, reason? }';
  const { call, approve, by, reason, identity, ...rest } = input as Record<string, unknown>;
  const extra = Object.keys(rest);
  if (extra.length) return `an answer has no field ${extra.map((k) => `"${k}"`).join(', ')}`;
  if (call !== undefined && (typeof call !== 'string' || !call || call.length > 1000)) {
    return "call is the step's number, its activity id (c3) or its key";
  }
  if (typeof approve !== 'boolean') return 'approve is true or false';
  if (typeof by !== 'string' || !by.trim() || by.length > 200) return 'by names who answers: 1-200 characters';
  if (reason !== undefined && (typeof reason !== 'string' || reason.length > 1000)) {
    return 'reason is a string of at most 1000 characters';
  }
  return identity === undefined ? undefined : identityProblem(identity);
}

/** A9: who signed in, as the identity provider vouched: { issuer, subject, email? }, each a short string. */
function identityProblem(identity: unknown): string | undefined {
  const what = 'identity is { issuer, subject, email? }, as the identity provider vouched for them';
  if (!identity || typeof identity !== 'object' || Array.isArray(identity)) return what;
  const { issuer, subject, email, ...rest } = identity as Record<string, unknown>;
  if (Object.keys(rest).length) return what;
  const short = (v: unknown) => typeof v === 'string' && v.length > 0 && v.length <= 1000;
  if (!short(issuer) || !short(subject) || (email !== undefined && !short(email))) return what;
  return undefined;
}

/** I2: how a grant, or a server's `args` and `env` values, name the folder of the tenant whose calls they serve. */
export const TENANT = '{tenant}';

/** Why a grant's path is not one the node can give per tenant, or undefined (pure). */
export function grantTemplateProblem(p: string): string | undefined {
  const braces = p.match(/\{[^}]*\}?/g) ?? [];
  const other = braces.find((b) => b !== TENANT);
  if (other) return `${other} is not a name a grant may hold: only {tenant}, a folder per tenant`;
  return tenantPlaceProblem(p, 'a grant', 'a whole folder of a grant\'s path ("data/{tenant}")');
}

/**
 * Why a server's `args` or `env` value names `{tenant}` in a way the node cannot fill, or undefined (pure): as in a
 * grant, a whole component of a path, once. Other braces are the server's own business (a JSON argument).
 */
export function tenantValueProblem(value: string): string | undefined {
  return tenantPlaceProblem(value, 'a value', 'a whole component of a path ("/srv/memory/{tenant}/memory.jsonl")');
}

function tenantPlaceProblem(p: string, holder: string, whole: string): string | undefined {
  const times = p.split(TENANT).length - 1;
  if (times > 1) return `{tenant} may appear once in ${holder}`;
  if (times === 1 && !p.split(/[/\\]/).includes(TENANT)) return `{tenant} is ${whole}, not part of a name`;
  return undefined;
}

/** `{tenant}` in `template` replaced by the tenant's name: one its schema takes, never one that climbs (`.`, `..`). */
export function fillTenant(template: string, tenant: string): string {
  if (!template.includes(TENANT)) return template;
  if (tenantNameProblem(tenant) || tenant === '.' || tenant === '..')
    throw new Error(`"${tenant}" cannot name a folder of a tenant`);
  return template.replace(TENANT, tenant);
}
