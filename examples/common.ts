import { randomBytes } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import * as path from 'node:path';
import type { AddressInfo } from 'node:net';
import { StringDecoder } from 'node:string_decoder';
import type { CallToolResult, McpServer, ServerContext } from '@modelcontextprotocol/server';
import { serveStdio as serveStdioEntry } from '@modelcontextprotocol/server/stdio';
import { McpHttpEndpoint, readJsonBody, replyError, sendResponse, webRequest } from '../mcp/http-server';
import type { Era } from '../mcp/http-server';
import { requestMeta } from '../plugin/kit/keys';
import type { RequestWithMeta } from '../plugin/kit/keys';

/**
 * Builds a fresh McpServer. The entries call it for each connection on stdio, each session over HTTP (an older
 * client's) and each 2026-07-28 request over HTTP; anything they must share (a ledger, a seen-set) lives in the
 * factory's closure.
 */
export type ServerFactory = (era?: Era) => McpServer;

/** The context McpServer passes to a tool handler (its second argument): the request's `_meta`, signal, notify. */
export type ToolContext = ServerContext;

/** A running Streamable HTTP server, as returned by {@link serveHttp}. */
export interface HttpHandle {
  /** The MCP endpoint, e.g. `http://127.0.0.1:41234/mcp`. */
  url: string;
  port: number;
  /** Closes every session (aborting in-flight handlers) and the http server. Safe to call twice. */
  close(): Promise<void>;
}

// The key's name and reader are the plugin kit's; the examples and their tests import them from here too.
export { IDEMPOTENCY_KEY_META, idempotencyKey } from '../plugin/kit/keys';

/** O3: the trace context a request came with (`_meta.traceparent`, MCP SEP-414), for the log of what it received. */
export function traceOf(ctx: RequestWithMeta): { traceparent?: string } {
  const traceparent = requestMeta(ctx)?.traceparent;
  return typeof traceparent === 'string' ? { traceparent } : {};
}

/** A JSON-RPC request body larger than this is refused with 413; the examples never need more. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

/**
 * Serves the factory's servers on stdin/stdout, both revisions: a 2026-07-28 client's `server/discover`, or an older
 * client's `initialize`. Resolves once listening. Nothing else may write to stdout in this mode: it carries the
 * protocol, so diagnostics go to stderr. When stdin ends, the SDK's transport closes, and handlers still running are
 * aborted (their signal fires) instead of finishing for a client that is gone.
 */
export async function serveStdio(factory: ServerFactory): Promise<void> {
  serveStdioEntry(({ era }) => factory(era));
}

/**
 * Serves the factory's servers over Streamable HTTP at `/mcp`, both revisions on one endpoint (mcp/http-server.ts):
 * a 2026-07-28 client's requests one by one, each on a fresh server (its stream closed is its cancel), and an older
 * client's stateful session, opened by `initialize` and named by `mcp-session-id`.
 *
 * Responses to calls are SSE streams when a handler reports progress. JSON response mode is deliberately not used:
 * an older client cancels a call by POSTing `notifications/cancelled` while the call's own POST is still open.
 *
 * @param port - 0 picks a free port; read the chosen one from the result.
 */
export async function serveHttp(factory: ServerFactory, port = 0, host = '127.0.0.1'): Promise<HttpHandle> {
  const endpoint = new McpHttpEndpoint((era) => factory(era));

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const { pathname } = new URL(req.url ?? '/', 'http://localhost');
    if (pathname !== '/mcp') return replyError(res, 404, -32601, `no MCP endpoint at ${pathname}; use /mcp`);
    if (req.method !== 'POST' && req.method !== 'GET' && req.method !== 'DELETE') {
      res.setHeader('Allow', 'GET, POST, DELETE');
      return replyError(res, 405, -32000, `method ${req.method} not allowed`);
    }
    const body = req.method === 'POST' ? await readJsonBody(req, res, MAX_BODY_BYTES) : undefined;
    if (req.method === 'POST' && !body) return;
    await sendResponse(res, await endpoint.serve(webRequest(req, res, body?.raw), body?.value));
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      replyError(res, 500, -32603, err instanceof Error ? err.message : String(err));
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;

  let closing: Promise<void> | undefined;
  return {
    url: `http://${urlHost}:${bound}/mcp`,
    port: bound,
    close() {
      closing ??= (async () => {
        // Closing a session closes its McpServer, which aborts the signal of every handler still running.
        await endpoint.close();
        await new Promise<void>((resolve, reject) => {
          server.close((err) => (err ? reject(err) : resolve()));
          // SSE streams and keep-alive sockets would otherwise hold server.close() open.
          server.closeAllConnections();
        });
      })();
      return closing;
    },
  };
}

/**
 * Entry point for an example run as `node dist/examples/<name>.js [--http PORT] [--host HOST]`. With `--http` it
 * serves Streamable HTTP and prints exactly one line, `listening <url>`, to stderr; otherwise it serves stdio.
 */
export async function runMain(factory: ServerFactory, argv: string[] = process.argv.slice(2)): Promise<void> {
  let httpPort: number | undefined;
  let host = '127.0.0.1';
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const [flag, inline] = arg.startsWith('--') && arg.includes('=') ? arg.split('=', 2) : [arg, undefined];
    const value = (): string => {
      const v = inline ?? argv[++i];
      if (v === undefined) throw new Error(`${flag} needs a value`);
      return v;
    };
    if (flag === '--http') {
      const v = value();
      httpPort = Number(v);
      if (!Number.isInteger(httpPort) || httpPort < 0 || httpPort > 65535) throw new Error(`bad --http port: ${v}`);
    } else if (flag === '--host') {
      host = value();
    } else {
      throw new Error(`unknown argument: ${arg} (usage: [--http PORT] [--host HOST])`);
    }
  }

  if (httpPort === undefined) {
    await serveStdio(factory);
    return;
  }
  const handle = await serveHttp(factory, httpPort, host);
  process.stderr.write(`listening ${handle.url}\n`);
  const stop = (): void => {
    void handle.close().finally(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

/** This process among others: in a sandbox a pid is its namespace's, the same in every sandbox. */
const instance = randomBytes(4).toString('hex');

/**
 * Appends `{ t, pid, instance, ...entry }` as one JSON line to the file named by env `OZ0_RECEIVED_LOG`, if set.
 * Synchronous so that the line is on disk before the handler goes on (and before a deliberate `process.exit`). Tests
 * read the file with {@link readReceived} to see what a server was actually sent.
 */
export function recordReceived(entry: object): void {
  const file = process.env.OZ0_RECEIVED_LOG;
  if (!file) return;
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.appendFileSync(file, JSON.stringify({ t: Date.now(), pid: process.pid, instance, ...entry }) + '\n');
}

/** Parses a file written by {@link recordReceived}. A missing file is `[]`; a torn last line is skipped. */
export function readReceived(file: string): Array<Record<string, unknown>> {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  return parseRecords(text.split('\n'));
}

/**
 * Follows a file written by {@link recordReceived} from where the last look ended, so a poll every few
 * milliseconds reads only what was added, not the whole file; a last line without its end waits for it.
 */
export function tailReceived(file: string): () => Array<Record<string, unknown>> {
  let offset = 0;
  let rest = '';
  const decoder = new StringDecoder('utf8');
  return () => {
    let fd: number;
    try {
      fd = fs.openSync(file, 'r');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
      throw err;
    }
    try {
      const size = fs.fstatSync(fd).size;
      if (size <= offset) return [];
      const buf = Buffer.alloc(size - offset);
      const n = fs.readSync(fd, buf, 0, buf.length, offset);
      offset += n;
      const lines = (rest + decoder.write(buf.subarray(0, n))).split('\n');
      rest = lines.pop()!;
      return parseRecords(lines);
    } finally {
      fs.closeSync(fd);
    }
  };
}

function parseRecords(lines: string[]): Array<Record<string, unknown>> {
  const out: Array<Record<string, unknown>> = [];
  for (const line of lines) {
    if (!line.trim()) continue;
    try {
      out.push(JSON.parse(line) as Record<string, unknown>);
    } catch {
      // A process killed mid-append leaves a partial line; it was never a complete record.
    }
  }
  return out;
}

/**
 * Returns a function that reports progress for the current request. It sends `notifications/progress` only when the
 * request carried `_meta.progressToken` (a client asks for progress by sending one), and is a no-op otherwise.
 * After the request is cancelled the SDK drops these notifications itself.
 */
export function progressNotifier(
  ctx: ToolContext,
): (progress: number, total?: number, message?: string) => Promise<void> {
  const progressToken = ctx.mcpReq._meta?.progressToken;
  return async (progress, total, message) => {
    if (progressToken === undefined) return;
    await ctx.mcpReq.notify({
      method: 'notifications/progress',
      params: {
        progressToken,
        progress,
        ...(total !== undefined && { total }),
        ...(message !== undefined && { message }),
      },
    });
  };
}

/**
 * The abort reason as a string. The SDK aborts a handler's signal with the `reason` string of the
 * `notifications/cancelled` it received (stdio, and an older client's session); when the connection closed — which is
 * how a 2026-07-28 client cancels a call over HTTP: it closes the call's stream — the reason is the SDK's
 * `ConnectionClosed` error, which reads `Connection closed`.
 */
export function abortReason(signal: AbortSignal): string {
  if (typeof signal.reason === 'string') return signal.reason;
  return signal.reason instanceof Error ? signal.reason.message : String(signal.reason);
}

/** Waits `ms`, or less if `signal` aborts first. Never rejects. */
export function abortableSleep(ms: number, signal?: AbortSignal): Promise<'done' | 'aborted'> {
  if (signal?.aborted) return Promise.resolve('aborted');
  return new Promise((resolve) => {
    const onAbort = (): void => {
      clearTimeout(timer);
      resolve('aborted');
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve('done');
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** JSON with object keys sorted at every level, so two argument objects compare equal whatever their key order. */
export function canonicalJson(value: unknown): string {
  const sort = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(sort);
    if (v !== null && typeof v === 'object') {
      return Object.fromEntries(
        Object.keys(v)
          .sort()
          .map((k) => [k, sort((v as Record<string, unknown>)[k])]),
      );
    }
    return v;
  };
  return JSON.stringify(sort(value)) ?? 'null';
}

/** A tool error result: the call completed and failed, as opposed to a JSON-RPC error. */
export function toolError(text: string): CallToolResult {
  return { content: [{ type: 'text', text }], isError: true };
}
