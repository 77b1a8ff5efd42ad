/**
 * A remote server: Streamable HTTP on a connection (url + headers). Header values of the form `env:NAME` are read
 * from the node's environment when the connection opens and are never logged.
 *
 * B4 lives here whole. A 429 on the POST that carries a call's own `tools/call` means the server made nothing and
 * asked for a wait: the transport answers that request itself with the busy error result a server of oz0's would
 * have sent (`oz0/retryable`, `oz0/retry_after` from Retry-After), so the attempt treats it as any busy answer (B2,
 * B3). A 429 on any other request stays the SDK's HTTP error: it says nothing about the call.
 */
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import type { RemoteServerConfig } from '../../common/config';
import { RETRY_AFTER_META, RETRYABLE_META, parseRetryAfter } from '../../common/protocol';
import { resolveEnvRefs } from './env';

/** The id of a lone `tools/call` request in a POST body, or undefined when the body is anything else. */
function toolsCallId(body: unknown): string | number | undefined {
  if (typeof body !== 'string') return undefined;
  let message: unknown;
  try {
    message = JSON.parse(body);
  } catch {
    return undefined;
  }
  const m = message as { method?: unknown; id?: unknown };
  return m?.method === 'tools/call' && (typeof m.id === 'string' || typeof m.id === 'number') ? m.id : undefined;
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

export function createRemoteTransport(
  server: string,
  config: RemoteServerConfig,
  env: NodeJS.ProcessEnv,
): StreamableHTTPClientTransport {
  const headers = resolveEnvRefs(config.headers, env, `servers.${server}.headers`);
  const fetchWith429: FetchLike = async (url, init) => {
    const response = await fetch(url, init);
    const id = response.status === 429 && init?.method === 'POST' ? toolsCallId(init.body) : undefined;
    if (id === undefined) return response;
    await response.body?.cancel();
    const result = rateLimitedResult(server, parseRetryAfter(response.headers.get('retry-after')));
    return new Response(JSON.stringify({ jsonrpc: '2.0', id, result }), {
      status: 200,
      headers: { 'content-type': 'application/json' },
    });
  };
  return new StreamableHTTPClientTransport(new URL(config.url), {
    requestInit: { headers },
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
