/**
 * A remote server: Streamable HTTP on a connection (url + headers). Header values of the form `env:NAME`
 * are read from the node's environment when the connection opens and are never logged.
 */
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { RemoteServerConfig } from '../../worker/config';
import { resolveEnvRefs } from './env';

/** Sees every HTTP exchange of the session: the place where a 429 on a call's own POST is read (B4). */
export type HttpObserver = (exchange: { method: string; body: unknown; response: Response }) => void;

export function createRemoteTransport(
  server: string,
  config: RemoteServerConfig,
  env: NodeJS.ProcessEnv,
  observer?: HttpObserver,
): StreamableHTTPClientTransport {
  const headers = resolveEnvRefs(config.headers, env, `servers.${server}.headers`);
  const observedFetch: FetchLike = async (url, init) => {
    const response = await fetch(url, init);
    if (observer) {
      let body: unknown;
      try {
        body = typeof init?.body === 'string' ? JSON.parse(init.body) : undefined;
      } catch {
        body = undefined;
      }
      observer({ method: init?.method ?? 'GET', body, response });
    }
    return response;
  };
  return new StreamableHTTPClientTransport(new URL(config.url), {
    requestInit: { headers },
    fetch: observedFetch,
    // One retry layer (B5): the SDK does not reconnect behind the activity's back.
    reconnectionOptions: {
      maxRetries: 0,
      initialReconnectionDelay: 1000,
      maxReconnectionDelay: 1000,
      reconnectionDelayGrowFactor: 1,
    },
  });
}
