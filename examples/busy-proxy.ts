/** An HTTP proxy in front of a Streamable HTTP MCP server that answers 429 when told to: B4 tests, 429 storms. */
import http from 'node:http';

export interface BusyProxy {
  url: string;
  close(): Promise<void>;
}

/**
 * Proxies every request to `target`; for a POST whose JSON-RPC method makes `limit` return a Retry-After value,
 * answers 429 with that header instead, and the server never sees the request.
 */
export async function startBusyProxy(target: string, limit: (method: string | undefined) => string | undefined) {
  const proxy = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      let method: string | undefined;
      try {
        method = (JSON.parse(body.toString()) as { method?: string }).method;
      } catch {
        method = undefined;
      }
      const retryAfter = limit(method);
      if (retryAfter !== undefined) {
        res.writeHead(429, { 'retry-after': retryAfter, 'content-type': 'text/plain' });
        return res.end('slow down');
      }
      const upstream = http.request(target, { method: req.method, headers: req.headers }, (up) => {
        res.writeHead(up.statusCode ?? 500, up.headers);
        up.pipe(res);
      });
      upstream.on('error', () => res.destroy());
      upstream.end(body);
    });
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
  return {
    url: `http://127.0.0.1:${(proxy.address() as { port: number }).port}/mcp`,
    async close() {
      proxy.closeAllConnections();
      await new Promise((r) => proxy.close(r));
    },
  } satisfies BusyProxy;
}
