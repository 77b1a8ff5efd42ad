/**
 * oz0's wire protocol with MCP servers, written once: the `_meta` names it sends and reads, and how it reads them.
 * The node, the drill and the plugin kit (which authors import) all use these, so they cannot drift apart. Pure; the
 * schemas of what a request carries and of the config's protocol choice are in ./schemas.
 */

/** On every tools/call oz0 sends (K1); in a listing's `_meta`, `true` says the function honours it. */
export const IDEMPOTENCY_KEY_META = 'oz0/idempotency_key';
/** On an error result: the service is busy and the call may be made again (B1). */
export const RETRYABLE_META = 'oz0/retryable';
/** On a busy error result: the wait the service asked for, in seconds (B1). */
export const RETRY_AFTER_META = 'oz0/retry_after';
/**
 * In a listing's `_meta`, `true`: the function resumes (P3). In a progress notification's `_meta`: the token of
 * where the work got to. In a later attempt's request `_meta`: `{ token, progress }` to go on from.
 */
export const RESUME_META = 'oz0/resume';

/**
 * H3: in each tool a harness's gateway lists, the tool's `<server>.<function>`: the name policies, patterns, the trace
 * and metrics use, beside the listed name a model takes (./model-names.ts).
 */
export const TOOL_META = 'oz0/tool';

/**
 * D1: in the result the node makes for an answer it dropped as it came (past `node.maxResultMiB`): `{ bytes, nonce }`,
 * the nonce the node's own, so no server's answer passes for one.
 */
export const DROPPED_META = 'oz0/dropped';

/** P3: a resume token is letters, digits and `._:~+/=-`, 1-256 characters. */
export const RESUME_TOKEN = /^[A-Za-z0-9._:~+/=-]{1,256}$/;

type WithMeta = { _meta?: { [key: string]: unknown } };

/** A function honours the key when its listing says `_meta["oz0/idempotency_key"] === true`. */
export function honoursKey(tool: WithMeta): boolean {
  return tool._meta?.[IDEMPOTENCY_KEY_META] === true;
}

/** A function takes part in resume when its listing says `_meta["oz0/resume"] === true` (P3). */
export function declaresResume(tool: WithMeta): boolean {
  return tool._meta?.[RESUME_META] === true;
}

/** B1: a busy answer is an error result with `_meta["oz0/retryable"] === true`, and maybe a wait in seconds. */
export function busyOf(result: unknown): { retryAfter?: number } | undefined {
  if (result === null || typeof result !== 'object') return undefined;
  const { isError, _meta } = result as { isError?: unknown } & WithMeta;
  if (isError !== true || _meta?.[RETRYABLE_META] !== true) return undefined;
  const wait = _meta[RETRY_AFTER_META];
  return typeof wait === 'number' && Number.isFinite(wait) && wait >= 0 ? { retryAfter: wait } : {};
}

/** The resume token a progress notification carries in `_meta["oz0/resume"]`: valid, invalid, or none. */
export function resumeTokenOf(meta: unknown): { token: string } | { invalid: true } | undefined {
  const value = (meta as Record<string, unknown> | undefined)?.[RESUME_META];
  if (value === undefined) return undefined;
  return typeof value === 'string' && RESUME_TOKEN.test(value) ? { token: value } : { invalid: true };
}

/** B4: an HTTP Retry-After header, in seconds: a number of seconds or an HTTP date; anything else is none. */
export function parseRetryAfter(header: string | null | undefined, now = Date.now()): number | undefined {
  if (!header) return undefined;
  const text = header.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const date = Date.parse(text);
  return Number.isNaN(date) ? undefined : Math.max(0, (date - now) / 1000);
}

/** The MCP revision of the stateless core (`server/discover`, a `_meta` envelope on every request, no session). */
export const MODERN_PROTOCOL = '2026-07-28';
/** The newest revision of the `initialize` handshake: oz0 speaks it, or an older one, to a server without 2026-07-28. */
export const LEGACY_PROTOCOL = '2025-11-25';

/** The `_meta` keys MCP reserves for itself (`io.modelcontextprotocol/…`: the server's identity, a related task, …). */
const MCP_RESERVED_META = 'io.modelcontextprotocol/';

/**
 * A result's `_meta` without the keys MCP reserves: they speak of the hop between one server and oz0 (2026-07-28
 * stamps each result with its server's identity), not of the call, so they are neither kept nor passed on.
 */
export function withoutReservedMeta(meta: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  if (!meta) return undefined;
  const kept = Object.fromEntries(Object.entries(meta).filter(([key]) => !key.startsWith(MCP_RESERVED_META)));
  return Object.keys(kept).length ? kept : undefined;
}

/** MCP tasks as an extension (SEP-2663): the id a server and a client declare in their capabilities' `extensions`. */
export const TASKS_EXTENSION = 'io.modelcontextprotocol/tasks';
