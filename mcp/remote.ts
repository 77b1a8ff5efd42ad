/**
 * A remote server: Streamable HTTP on a connection (url + headers). Header values of the form `env:NAME` are read
 * from the node's environment when the connection opens and are never logged. A per-tenant server's connection is
 * one tenant's own (./credentials.ts).
 *
 * B4 lives here whole. A 429 on the POST that carries a call's own `tools/call` means the server made nothing and
 * asked for a wait: the transport answers that request itself with the busy error result a server of oz0's would
 * have sent (`oz0/retryable`, `oz0/retry_after` from Retry-After), so the attempt treats it as any busy answer (B2,
 * B3). A 429 on any other request stays the SDK's HTTP error: it says nothing about the call.
 */
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { CallToolResult, FetchLike } from '@modelcontextprotocol/client';
import type { RemoteServerConfig } from '../common/config';
import { RETRY_AFTER_META, RETRYABLE_META, parseRetryAfter } from '../model/protocol';
import { resolveEnvRefs } from './env';
import { boundedResponse } from './dropped';
import type { TenantCredential } from './credentials';

/** The method and id of a lone request in a POST body, or undefined when the body is anything else. */
function requestOf(body: unknown): { method: string; id: string | number } | undefined {
  if (typeof body !== 'string') return undefined;
  let message: unknown;
  try {
    message = JSON.parse(body);
  } catch {
    return undefined;
  }
  const m = message as { method?: unknown; id?: unknown };
  return typeof m?.method === 'string' && (typeof m.id === 'string' || typeof m.id === 'number')
    ? { method: m.method, id: m.id }
    : undefined;
}

/**
 * B4: the server answered 429 to the connection's `server/discover`. Thrown out of the probe so that it is not taken
 * for an older server (the SDK falls back to `initialize` on any other 4xx): like a 429 on `initialize`, it says
 * nothing about a call, whose outcome is then unknown.
 */
export class ConnectRateLimited extends Error {
  override name = 'ConnectRateLimited';
}

/** B4: the busy error result for a call whose own POST was answered 429, with the server's wait. */
export function rateLimitedResult(server: string, retryAfter: number | undefined): CallToolResult {
  const wait = retryAfter === undefined ? '' : ` (Retry-After: ${Math.round(retryAfter)} s)`;
  return {
    isError: true,
    content: [{ type: 'text', text: `${server} answered HTTP 429 Too Many Requests${wait}; nothing was made` }],
    _meta: { [RETRYABLE_META]: true, ...(retryAfter !== undefined && { [RETRY_AFTER_META]: retryAfter }) },
  };
}

/**
 * A server's transport. `tenant` (R1, R2): a connection of one tenant's own, its requests with the tenant's headers and
 * its OAuth client (the SDK's `authProvider`: discovery on the server's 401, a token per request, step-up on 403);
 * without, the server's own headers for every tenant.
 */
export function createRemoteTransport(
  server: string,
  config: RemoteServerConfig,
  env: NodeJS.ProcessEnv,
  tenant?: TenantCredential,
  /** I13: the node's fetch, which a server's redirect cannot lead inward (./guarded-fetch.ts). */
  guarded: FetchLike = fetch,
  /** D1: the largest answer taken whole (bytes, with its envelope); past it, it is dropped as it comes (./dropped.ts). */
  maxMessageBytes = Infinity,
): StreamableHTTPClientTransport {
  const headers = tenant ? undefined : resolveEnvRefs(config.headers, env, `servers.${server}.headers`);
  const base: FetchLike = tenant?.fetch ?? guarded;
  const fetchWith429: FetchLike = async (url, init) => {
    const response = await base(url, init);
    const request = init?.method === 'POST' ? requestOf(init.body) : undefined;
    if (response.status === 429 && request?.method === 'server/discover') {
      await response.body?.cancel();
      throw new ConnectRateLimited(`${server} answered HTTP 429 Too Many Requests to server/discover`);
    }
    if (request?.method !== 'tools/call') return response;
    const { id } = request;
    // D1: a call's answer past the bound is dropped as it comes, and stands as a result naming its size.
    if (response.status !== 429) return boundedResponse(response, id, maxMessageBytes);
    await response.body?.cancel();
    // `resultType` as a 2026-07-28 server writes it; an older session's client reads past it.
    const result = {
      resultType: 'complete',
      ...rateLimitedResult(server, parseRetryAfter(response.headers.get('retry-after'))),
    };
    return new Response(JSON.stringify({ jsonrpc: '2.0', id, result }), {
      status: 200,
      headers: { 'content-type': 'application/json' },
    });
  };
  return new StreamableHTTPClientTransport(new URL(config.url), {
    ...(headers && { requestInit: { headers } }),
    ...(tenant?.oauth && { authProvider: tenant.oauth }),
    fetch: fetchWith429,
    // One retry layer (B5): the SDK does not reconnect behind the activity's back.
    reconnectionOptions: {
      maxRetries: 0,
      initialReconnectionDelay: 1000,
      maxReconnectionDelay: 1000,
      reconnectionDelayGrowFactor: 1,
    },
  });
}
