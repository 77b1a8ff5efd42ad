/**
 * An MCP server over Streamable HTTP that speaks both revisions on one endpoint, on Node's http server: 2026-07-28
 * per request (`server/discover`, no session; a call's stream closed is its cancel), and the `initialize` handshake
 * with stateful sessions for older clients (their `notifications/cancelled` reaches the handler of the session that
 * runs the request, and `list_changed` reaches the session). The node's gateway (H3) and the example servers serve it.
 *
 * The SDK's `createMcpHandler` serves 2026-07-28; its own legacy leg is stateless, which loses a legacy client's
 * cancel (its notification lands in a fresh server), so legacy requests are routed to sessions here instead, with
 * the SDK's own predicate (`isLegacyRequest`). The SDK's Node adapter (`@modelcontextprotocol/node`) is not released
 * at 2.4.0, so the few lines that turn a Node request into a web `Request` and a `Response` back are here too.
 */
import { randomUUID } from 'node:crypto';
import type http from 'node:http';
import {
  WebStandardStreamableHTTPServerTransport,
  createMcpHandler,
  isInitializeRequest,
  isLegacyRequest,
} from '@modelcontextprotocol/server';
import type { AuthInfo, McpHttpHandler, McpServer, RequestId, Server } from '@modelcontextprotocol/server';

/** Which revision a server instance is made for: `modern` serves one 2026-07-28 request, `legacy` one session. */
export type Era = 'modern' | 'legacy';

/** Makes a fresh server: one per 2026-07-28 request, one per legacy session. */
export type EraServerFactory = (era: Era) => Server | McpServer;

/** Both revisions on one endpoint, for servers from one factory. */
export class McpHttpEndpoint {
  private readonly sessions = new Map<
    string,
    { transport: WebStandardStreamableHTTPServerTransport; server: Server }
  >();
  private readonly modern: McpHttpHandler;

  constructor(
    private readonly factory: EraServerFactory,
    onerror?: (err: Error) => void,
    /** Legacy sessions at once; an `initialize` past them is answered 429 (a client that never ends its own). */
    private readonly maxSessions = Infinity,
  ) {
    this.modern = createMcpHandler(({ era }) => factory(era), { legacy: 'reject', ...(onerror && { onerror }) });
  }

  /**
   * Answers one request; `parsedBody` is a POST's JSON body, already read. `authInfo` is what a bearer token gate
   * verified (a protected server's): its handlers read it as `ctx.http.authInfo`, and a tool's scope challenge is
   * answered with 403 `insufficient_scope` before its handler runs.
   */
  async serve(request: Request, parsedBody: unknown, authInfo?: AuthInfo): Promise<Response> {
    const body = { ...(parsedBody === undefined ? {} : { parsedBody }), ...(authInfo && { authInfo }) };
    if (!(await isLegacyRequest(request, parsedBody))) return this.modern.fetch(request, body);
    const sessionId = request.headers.get('mcp-session-id');
    if (sessionId !== null) {
      // 404 tells a client its session is gone, and that it must initialize again.
      const session = this.sessions.get(sessionId);
      return session ? session.transport.handleRequest(request, body) : jsonError(404, -32001, 'session not found');
    }
    if (request.method !== 'POST' || !isInitializeRequest(parsedBody)) {
      return jsonError(400, -32000, 'a request without mcp-session-id must be server/discover or an initialize POST');
    }
    if (this.sessions.size >= this.maxSessions) {
      return jsonError(429, -32000, `too many sessions open (${this.maxSessions}): end one (DELETE) before another`);
    }
    const made = this.factory('legacy');
    const server = 'server' in made ? made.server : made;
    const transport: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => {
        this.sessions.set(id, { transport, server });
      },
    });
    // Set before connect: the server chains onto it rather than replacing it.
    transport.onclose = () => {
      if (transport.sessionId !== undefined) this.sessions.delete(transport.sessionId);
    };
    // The McpServer's own connect, where there is one: it answers a tool's scope challenge (403 insufficient_scope).
    await made.connect(transport);
    return transport.handleRequest(request, body);
  }

  /**
   * Ends a legacy session's request's event stream. A request its client cancelled (`notifications/cancelled`) gets
   * no answer (the protocol says so), and the SDK's transport keeps its stream open until the session ends: a
   * connection held for nothing. Its handler calls this once the work has stopped (issue 26.6).
   */
  endRequest(sessionId: string | undefined, requestId: RequestId): void {
    if (sessionId !== undefined) this.sessions.get(sessionId)?.transport.closeSSEStream(requestId);
  }

  /** The tool list changed: legacy sessions get `notifications/tools/list_changed`, 2026-07-28 listeners the event. */
  toolsChanged(): void {
    for (const { server } of this.sessions.values()) server.sendToolListChanged().catch(() => undefined);
    this.modern.notify.toolsChanged();
  }

  /** Ends every session (their handlers' signals abort) and every 2026-07-28 exchange in flight. */
  async close(): Promise<void> {
    const open = [...this.sessions.values()];
    this.sessions.clear();
    await Promise.allSettled([...open.map((s) => s.transport.close()), this.modern.close()]);
  }
}

/** A JSON-RPC error answer, as a web Response. */
export function jsonError(status: number, code: number, message: string): Response {
  return Response.json({ jsonrpc: '2.0', error: { code, message }, id: null }, { status });
}

/** A JSON-RPC error answer on a Node response (nothing more once headers went out). */
export function replyError(res: http.ServerResponse, status: number, code: number, message: string): void {
  if (res.headersSent) return void res.end();
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code, message }, id: null }));
}

/**
 * The lingering close of HTTP servers: after a 413, what the client still sends is read and dropped (Node's server
 * does so for a request it answered, the connection kept) — up to a bound, for a while, then it is cut — so a client
 * still sending reads the 413 rather than a reset, also through a sandbox's forwarder, whose write to a closed socket
 * would lose the answer waiting behind it.
 */
function discardRest(req: http.IncomingMessage, maxBytes: number): void {
  let dropped = 0;
  const cut = setTimeout(() => req.destroy(), 5000);
  req.on('data', (chunk: Buffer) => {
    dropped += chunk.length;
    if (dropped > 4 * maxBytes) req.destroy();
  });
  req.once('close', () => clearTimeout(cut));
}

/**
 * Reads a request's body, and its JSON. Undefined, with the answer sent, when it is over `maxBytes` (413) or not
 * JSON (400): neither reaches a server.
 */
export function readJsonBody(
  req: http.IncomingMessage,
  res: http.ServerResponse,
  maxBytes: number,
): Promise<{ raw: Buffer; value: unknown } | undefined> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let over = false;
    req.on('data', (chunk: Buffer) => {
      if (over) return;
      size += chunk.length;
      if (size <= maxBytes) return void chunks.push(chunk);
      over = true;
      chunks.length = 0;
      replyError(res, 413, -32000, `request body over ${maxBytes} bytes`);
      discardRest(req, maxBytes);
      resolve(undefined);
    });
    req.once('end', () => {
      if (over) return;
      const raw = Buffer.concat(chunks);
      try {
        resolve({ raw, value: JSON.parse(raw.toString('utf8')) });
      } catch {
        replyError(res, 400, -32700, 'parse error: the body is not JSON');
        resolve(undefined);
      }
    });
    // A client gone mid-body: nothing to answer.
    req.once('error', () => resolve(undefined));
  });
}

/**
 * The web Request for a Node request whose body was read. Its signal aborts when the client goes away before the
 * answer is complete: on 2026-07-28 that is the call's cancel, and the server's handler is cancelled.
 */
export function webRequest(req: http.IncomingMessage, res: http.ServerResponse, body?: Buffer): Request {
  const gone = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) gone.abort(new Error('the client closed the request'));
  });
  const headers = new Headers();
  for (const [name, value] of Object.entries(req.headers)) {
    if (value === undefined) continue;
    for (const one of Array.isArray(value) ? value : [value]) headers.append(name, one);
  }
  return new Request(new URL(req.url ?? '/', `http://${req.headers.host ?? '127.0.0.1'}`), {
    method: req.method,
    headers,
    ...(body && req.method !== 'GET' && req.method !== 'HEAD' ? { body: new Uint8Array(body) } : {}),
    signal: gone.signal,
  });
}

/** Writes a web Response on a Node response, its body streamed as it comes; stops reading when the client goes away. */
export async function sendResponse(res: http.ServerResponse, response: Response): Promise<void> {
  res.writeHead(response.status, Object.fromEntries(response.headers));
  if (!response.body) return void res.end();
  // An event stream may say nothing for a while: the client has its headers now.
  res.flushHeaders();
  const reader = response.body.getReader();
  res.once('close', () => void reader.cancel().catch(() => undefined));
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (!res.write(value)) {
        await new Promise((resolve) => {
          res.once('drain', resolve);
          res.once('close', resolve);
        });
      }
    }
  } catch {
    // The client went away, or the stream failed: there is nobody to tell.
  }
  res.end();
}
