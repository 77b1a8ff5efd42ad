/**
 * How an attempt's lease on its server and the server's listing end when they cannot be had — before anything of
 * the call is sent: a server this node lacks, a tenant without the credentials a per-tenant server takes (R1), the
 * tenant's authorization refused (R4), a listing answered 429 (B4), a server not reachable, or one that cannot start
 * until its config or the node changes (S2: one attempt).
 */
import { FailureType } from '../../model/activities';
import { splitTool } from '../../model/checks';
import type { CallInput } from '../../model/activities';
import { CannotStart, OutcomeUnknown, challengeWords, hiddenFunctions, hiddenWhy } from '../../mcp';
import type { TenantCredential } from '../../mcp';
import type { Tool } from '@modelcontextprotocol/client';
import type { ServerPool } from '../pool';
import { authorizationEndOf, authorizationVerdict } from './authorized';
import type { AuthorizationVerdict } from './authorized';
import { AttemptEnd, Unsent } from './settle';

/** Refused before a lease is asked for: a server this node lacks, or a tenant without its credentials (R1). */
export function refusedBeforeLease(pool: ServerPool, server: string, input: CallInput): AttemptEnd | undefined {
  if (!pool.serverConfig(server)) {
    const why = `this node has no server named "${server}"`;
    return new AttemptEnd('failed', why, { type: FailureType.unknownTool, retryable: false });
  }
  const missing = pool.credentials.missing(server, input.tenant);
  if (!missing) return undefined;
  const failure = { type: FailureType.refused, retryable: false, message: `${input.tool}: refused: ${missing}` };
  return new AttemptEnd('refused', missing, failure);
}

/** Why the lease or its listing failed, as the attempt's end. */
export function listingFailure(
  err: unknown,
  credential: TenantCredential | undefined,
  input: CallInput,
  last: boolean,
): AttemptEnd {
  const refused = notAuthorizedBy(err, credential, input, last);
  if (refused) return refused;
  const message = (err as Error).message;
  if (err instanceof OutcomeUnknown) {
    // B4: the server answered 429 to the session's own requests; its listing is unknown, so no retry.
    const failure = { type: FailureType.attemptFailed, retryable: false, message: `${input.tool}: ${message}` };
    return new AttemptEnd('failed', `outcome unknown: ${message}`, failure);
  }
  if (err instanceof CannotStart) {
    // S2: another try would fail the same way (a refused sandbox, a missing program): one attempt, saying so.
    const note = `the server was not reachable: ${message}; not tried again: it would fail the same way until its config or the node changes`;
    const failure = { type: FailureType.attemptFailed, retryable: false, message: `${input.tool}: ${note}` };
    return new AttemptEnd('failed', note, failure);
  }
  const { server } = splitTool(input.tool);
  return new Unsent(`the server was not reachable: ${message}`, `server "${server}" was not reachable: ${message}`);
}

/** R4: the end of an attempt whose failure (of its lease, its listing or its request) says its authorization failed. */
export function notAuthorizedBy(
  err: unknown,
  credential: TenantCredential | undefined,
  input: Pick<CallInput, 'tool' | 'key'>,
  last: boolean,
): AttemptEnd | undefined {
  const end = authorizationEndOf(err, credential);
  return end && notAuthorized(authorizationVerdict(end, input.tool, last), credential, input.key);
}

/**
 * R4: the tenant's authorization failed, before anything of the call was made: busy (its authorization server), or
 * failed, saying which. A refused credential is forgotten: the next call starts again from the server's challenge.
 */
function notAuthorized(
  verdict: AuthorizationVerdict,
  credential: TenantCredential | undefined,
  key: string,
): AttemptEnd {
  credential?.refusals(key);
  if (verdict.outcome !== 'busy') credential?.oauth?.forget();
  return new AttemptEnd(verdict.outcome, verdict.note, verdict.failure, { unsent: true });
}

/**
 * R2, K1: the server refused the call's request before it ran it (401 for a token it no longer takes, 403 for a
 * scope it lacked): a new token was taken and the same request sent again within the attempt, under the same key.
 */
export function refusalNotes(credential: TenantCredential | undefined, key: string): string[] {
  return (credential?.refusals(key) ?? []).map((c) => {
    const why = c.status === 403 ? 'a token with the scopes it asked for' : 'a new token';
    return `the server refused the request before running it${challengeWords(c)}: sent again with ${why}`;
  });
}

/** The function in the server's listing; or the end of a call of one it does not list, saying why where it can. */
export async function functionOf(
  pool: ServerPool,
  server: string,
  fn: string,
  tools: Tool[],
  tenant: string,
): Promise<Tool> {
  const tool = tools.find((t) => t.name === fn);
  if (tool) return tool;
  // Perhaps listed only to clients that offer what oz0 does not (sampling, elicitation, roots): say so.
  const needs = (await hiddenFunctions(pool, server, tools, tenant).catch(() => undefined))?.get(fn);
  const why = `server "${server}" has no function "${fn}"${needs ? `: ${hiddenWhy(needs)}` : ''}`;
  throw new AttemptEnd('failed', why, { type: FailureType.unknownTool, retryable: false });
}
