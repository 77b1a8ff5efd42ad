/**
 * The Bookshop (examples/bookshop.ts), which shows the rules in docs/cancellation.md, cancelled the ways oz0 cancels a
 * call (C1–C3): `notifications/cancelled` with a reason, and for a sandboxed server also SIGTERM to its process group.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import * as fs from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, InMemoryTransport, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { Transport } from '@modelcontextprotocol/client';
import {
  WebStandardStreamableHTTPServerTransport,
  createMcpHandler,
  isInitializeRequest,
} from '@modelcontextprotocol/server';
import { ProcessTransport } from '../../mcp/process-transport';
import { sendResponse, webRequest } from '../../mcp/http-server';
import { createBookshop, startBookshopServer } from '../../examples/bookshop';
import type { Bookshop } from '../../examples/bookshop';
import { readReceived } from '../../examples/common';

jest.setTimeout(30_000);

const ROOT = path.join(__dirname, '..', '..');
const BOOKSHOP_TS = path.join(ROOT, 'examples', 'bookshop.ts');

/**
 * Lets `node -r <this> examples/bookshop.ts` run the example from its source, so these tests do not depend on a build
 * of dist/. The busy-loop test and the SIGTERM test need the server in a process of its own.
 */
const TS_LOADER = `
const fs = require('node:fs');
const ts = require(${JSON.stringify(require.resolve('typescript'))});
require.extensions['.ts'] = (module, file) => {
  const { outputText } = ts.transpileModule(fs.readFileSync(file, 'utf8'), {
    fileName: file,
    compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
  });
  module._compile(outputText, file);
};
`;

let tmp: string;
let receivedLog: string;
const cleanups: Array<() => Promise<unknown>> = [];

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-bookshop-'));
  receivedLog = path.join(tmp, 'received.jsonl');
  process.env.OZ0_RECEIVED_LOG = receivedLog;
});

afterEach(async () => {
  // Clients first, then servers, so that no handler is left writing to a closed transport.
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  delete process.env.OZ0_RECEIVED_LOG;
  fs.rmSync(tmp, { recursive: true, force: true });
});

type Received = Record<string, unknown> & { t: number };

/** Polls until `pick` returns something. It fails after `ms`. */
async function eventually<T>(
  pick: () => T | undefined | Promise<T | undefined>,
  ms = 5000,
  what = 'condition',
): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await pick();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms}ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function received(match: Record<string, unknown>): Received[] {
  return (readReceived(receivedLog) as Received[]).filter((r) => Object.entries(match).every(([k, v]) => r[k] === v));
}

function waitFor(match: Record<string, unknown>, ms = 5000): Promise<Received> {
  return eventually(() => received(match)[0], ms, JSON.stringify(match));
}

/** Settles how `call` ended, and when, without an unhandled rejection in the meantime. */
function outcome(call: Promise<unknown>): Promise<{ at: number; error?: Error }> {
  return call.then(
    () => ({ at: Date.now() }),
    (error: Error) => ({ at: Date.now(), error }),
  );
}

async function connect(transport: Transport, onerror?: (err: Error) => void): Promise<Client> {
  const client = new Client({ name: 'bookshop-test', version: '0.0.0' });
  if (onerror) client.onerror = onerror;
  await client.connect(transport);
  cleanups.push(() => client.close());
  // Listing tools lets the client check structuredContent against each outputSchema.
  await client.listTools();
  return client;
}

/** A real Client on a server from `shop`, over an in-memory pair. */
async function connectInMemory(shop: Bookshop): Promise<Client> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const server = shop();
  await server.connect(serverSide);
  cleanups.push(() => server.close());
  return connect(clientSide);
}

async function stockStatus(client: Client): Promise<{ holds: string[]; offline: string[] }> {
  const result = await client.callTool({ name: 'stock_status', arguments: {} });
  return result.structuredContent as { holds: string[]; offline: string[] };
}

/** Starts an order that waits 30 s for payment, and waits until its hold is on. */
async function startOrder(
  client: Client,
  title: string,
  pay_ms = 30_000,
): Promise<{ abort: AbortController; done: Promise<{ at: number; error?: Error }> }> {
  const abort = new AbortController();
  const done = outcome(client.callTool({ name: 'order_book', arguments: { title, pay_ms } }, { signal: abort.signal }));
  await waitFor({ event: 'hold', title });
  return { abort, done };
}

describe('order_book: cleanup in finally with a bounded wait', () => {
  it('releases the hold after a cancel, and the server records the reason', async () => {
    const client = await connectInMemory(createBookshop());
    const { abort, done } = await startOrder(client, 'Dune');
    expect(await stockStatus(client)).toEqual({ holds: ['Dune'], offline: [] });

    const cancelledAt = Date.now();
    abort.abort('customer walked away');
    const { at, error } = await done;
    expect(error?.message).toMatch(/customer walked away/);
    expect(at - cancelledAt).toBeLessThan(1000);

    const cancelled = await waitFor({ event: 'cancelled', title: 'Dune' });
    expect(cancelled.reason).toBe('customer walked away');
    // The release awaits a round trip after the signal aborted, and it still ran.
    const released = await waitFor({ event: 'released', title: 'Dune' });
    expect(released.t).toBeGreaterThanOrEqual(cancelled.t);
    expect(received({ event: 'ordered' })).toEqual([]);
    expect(await stockStatus(client)).toEqual({ holds: [], offline: [] });
  });

  it('releases the hold when the order goes through too', async () => {
    const client = await connectInMemory(createBookshop({ releaseMs: 5 }));
    const result = await client.callTool({ name: 'order_book', arguments: { title: 'Emma', pay_ms: 10 } });
    expect(result.isError).toBeFalsy();
    expect(result.structuredContent).toEqual({ title: 'Emma' });
    expect(received({ tool: 'order_book' }).map((r) => r.event)).toEqual(['hold', 'ordered', 'released']);
    expect(await stockStatus(client)).toEqual({ holds: [], offline: [] });
  });

  it('stops waiting for a slow release after releaseTimeoutMs', async () => {
    const client = await connectInMemory(createBookshop({ releaseMs: 1200, releaseTimeoutMs: 300 }));
    const { abort, done } = await startOrder(client, 'Ulysses');
    abort.abort('stop');
    await done;
    const cancelled = await waitFor({ event: 'cancelled', title: 'Ulysses' });
    const gaveUp = await waitFor({ event: 'release timed out', title: 'Ulysses' }, 3000);
    expect(gaveUp.t - cancelled.t).toBeGreaterThanOrEqual(250);
    expect(gaveUp.t - cancelled.t).toBeLessThan(1000);
    expect(await stockStatus(client)).toEqual({ holds: ['Ulysses'], offline: [] });
    // Promise.race only stopped the waiting: the release itself goes on, and lands later.
    await eventually(async () => (await stockStatus(client)).holds.length === 0 || undefined, 3000, 'the release');
  });

  it('shutdown() aborts running handlers and waits for their cleanup', async () => {
    const shop = createBookshop();
    const client = await connectInMemory(shop);
    const { done } = await startOrder(client, 'Beloved');
    const started = Date.now();
    await shop.shutdown(2000);
    expect(Date.now() - started).toBeLessThan(1500);
    // shutdown() returns only after the finally block ran.
    expect(received({ event: 'released', title: 'Beloved' })).toHaveLength(1);
    // Closing a server aborts its handlers with the SDK's ConnectionClosed.
    expect((await waitFor({ event: 'cancelled', title: 'Beloved' })).reason).toBe('Connection closed');
    expect((await done).error?.message).toMatch(/Connection closed/);
  });

  it('releases the hold after a cancel over Streamable HTTP', async () => {
    const server = await startBookshopServer(0);
    cleanups.push(() => server.close());
    const client = await connect(new StreamableHTTPClientTransport(new URL(server.url)));
    const { abort, done } = await startOrder(client, 'Middlemarch');
    abort.abort('cancelled over http');
    expect((await done).error?.message).toMatch(/cancelled over http/);
    expect((await waitFor({ event: 'cancelled', title: 'Middlemarch' })).reason).toBe('cancelled over http');
    await waitFor({ event: 'released', title: 'Middlemarch' });
    // The session goes on after a cancel.
    expect(await stockStatus(client)).toEqual({ holds: [], offline: [] });
  });
});

describe('rebuild_index: cooperative checks between chunks of CPU work', () => {
  const titles = Array.from({ length: 20 }, (_, i) => `book-${i + 1}`);

  it('stops between two books after a cancel, and search comes back online', async () => {
    const client = await connectInMemory(createBookshop());
    const abort = new AbortController();
    const done = outcome(
      client.callTool(
        { name: 'rebuild_index', arguments: { titles, ms_per_title: 50 } },
        {
          signal: abort.signal,
        },
      ),
    );
    await waitFor({ event: 'offline', tool: 'rebuild_index' });
    await eventually(() => received({ event: 'indexed', indexed: 2 })[0], 5000, 'two books indexed');
    expect(await stockStatus(client)).toEqual({ holds: [], offline: ['search'] });

    abort.abort('index rebuild stopped');
    expect((await done).error?.message).toMatch(/index rebuild stopped/);
    const cancelled = await waitFor({ event: 'cancelled', tool: 'rebuild_index' });
    expect(cancelled.reason).toBe('index rebuild stopped');
    const indexed = cancelled.indexed as number;
    expect(indexed).toBeGreaterThanOrEqual(2);
    expect(indexed).toBeLessThan(titles.length);
    const online = await waitFor({ event: 'online', tool: 'rebuild_index' });
    expect(online.indexed).toBe(indexed);
    expect(received({ event: 'indexed', tool: 'rebuild_index' })).toHaveLength(indexed);
    expect(await stockStatus(client)).toEqual({ holds: [], offline: [] });
  });

  it('indexes every title when nobody cancels', async () => {
    const client = await connectInMemory(createBookshop());
    const result = await client.callTool({ name: 'rebuild_index', arguments: { titles, ms_per_title: 1 } });
    expect(result.structuredContent).toEqual({ indexed: titles.length });
    expect((await waitFor({ event: 'online', tool: 'rebuild_index' })).indexed).toBe(titles.length);
  });
});

/** Spawns `node examples/bookshop.ts <args>` from source, in a process of its own. */
function spawnBookshop(args: string[]): ChildProcess {
  const loader = path.join(tmp, 'ts-loader.js');
  fs.writeFileSync(loader, TS_LOADER);
  const child = spawn(process.execPath, ['-r', loader, BOOKSHOP_TS, ...args], {
    cwd: ROOT,
    env: { ...process.env, OZ0_RECEIVED_LOG: receivedLog },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  cleanups.push(async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((resolve) => child.once('exit', resolve));
    child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), 3000);
    await exited;
    clearTimeout(timer);
  });
  return child;
}

/** Reads the `listening <url>` line that runMain prints in --http mode. */
function listeningUrl(child: ChildProcess, ms = 15_000): Promise<string> {
  return new Promise((resolve, reject) => {
    let stderr = '';
    const timer = setTimeout(() => reject(new Error(`no "listening" line after ${ms}ms; stderr: ${stderr}`)), ms);
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr += chunk.toString('utf8');
      const match = /^listening (\S+)$/m.exec(stderr);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`bookshop exited with ${code}; stderr: ${stderr}`));
    });
  });
}

describe('the bookshop in a process of its own', () => {
  it('rebuild_index_blocking: the cancel does not stop it, while the client stops waiting at once', async () => {
    // In its own process, the busy loop blocks only the server, as it would in production.
    const child = spawnBookshop(['--http', '0']);
    const url = await listeningUrl(child);
    const errors: string[] = [];
    const client = await connect(new StreamableHTTPClientTransport(new URL(url)), (err) => errors.push(err.message));
    const titles = Array.from({ length: 10 }, (_, i) => `book-${i + 1}`);
    const abort = new AbortController();
    const done = outcome(
      client.callTool(
        { name: 'rebuild_index_blocking', arguments: { titles, ms_per_title: 150 } },
        {
          signal: abort.signal,
        },
      ),
    );
    await waitFor({ event: 'indexed', tool: 'rebuild_index_blocking' });
    const cancelledAt = Date.now();
    abort.abort('stop the rebuild');
    const { at, error } = await done;
    expect(error?.message).toMatch(/stop the rebuild/);
    expect(at - cancelledAt).toBeLessThan(300);

    const finished = await waitFor({ event: 'finished', tool: 'rebuild_index_blocking' }, 5000);
    expect(finished).toMatchObject({ indexed: titles.length, aborted: false });
    expect(finished.t).toBeGreaterThan(at + 300);
    expect(received({ event: 'cancelled' })).toEqual([]);
    // The server sent its answer after all; the client had stopped waiting and dropped it.
    await eventually(() => errors.find((m) => /unknown message ID/.test(m)), 3000, 'the dropped answer');
  });

  it('C3: stopped like a sandboxed server in the middle of an order, it still releases the hold', async () => {
    // oz0's own stop: notifications/cancelled, then stdin closed and SIGTERM to the group, SIGKILL after the grace.
    const loader = path.join(tmp, 'ts-loader.js');
    fs.writeFileSync(loader, TS_LOADER);
    const transport = new ProcessTransport(
      {
        command: 'node',
        args: ['-r', loader, BOOKSHOP_TS],
        cwd: ROOT,
        env: { OZ0_RECEIVED_LOG: receivedLog, PATH: process.env.PATH ?? '' },
      },
      { killGraceMs: 2000 },
    );
    cleanups.push(() => transport.close());
    const client = await connect(transport);
    const { abort, done } = await startOrder(client, 'Persuasion');
    const stopping = Date.now();
    abort.abort('oz0: job cancelled');
    await transport.close();
    // Gone on its own, well inside the grace: no SIGKILL was needed.
    expect(Date.now() - stopping).toBeLessThan(1500);
    expect((await done).error?.message).toMatch(/oz0: job cancelled/);
    const cancelled = received({ event: 'cancelled', title: 'Persuasion' });
    expect(cancelled).toHaveLength(1);
    // The notification is on the pipe before the SIGTERM, and in practice it is read first; if not, the SIGTERM
    // handler's close aborts the handler with the default reason.
    expect(cancelled[0].reason).toMatch(/^oz0: job cancelled$|AbortError/);
    expect(received({ event: 'released', title: 'Persuasion' })).toHaveLength(1);
  });

  it("why the bookshop handles SIGTERM: Node's default dies at once, without running finally", async () => {
    const script = `
      const fs = require('node:fs');
      (async () => {
        try {
          process.stdout.write('ready\\n');
          await new Promise((resolve) => setTimeout(resolve, 10000));
        } finally {
          fs.appendFileSync(process.env.OZ0_RECEIVED_LOG, JSON.stringify({ t: Date.now(), event: 'finally' }) + '\\n');
        }
      })();
    `;
    const child = spawn(process.execPath, ['-e', script], {
      env: { ...process.env, OZ0_RECEIVED_LOG: receivedLog },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    const exited = new Promise<NodeJS.Signals | null>((resolve) =>
      child.once('exit', (_code, signal) => resolve(signal)),
    );
    cleanups.push(async () => {
      child.kill('SIGKILL');
      await exited;
    });
    await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the script did not start')), 5000);
      child.stdout?.once('data', () => {
        clearTimeout(timer);
        resolve(undefined);
      });
    });
    child.kill('SIGTERM');
    expect(await exited).toBe('SIGTERM');
    expect(received({ event: 'finally' })).toEqual([]);
  });
});

/**
 * Serves `shop` over Streamable HTTP in the modes that examples/common.ts's serveHttp does not use, on the v2 SDK's
 * web-standard transports: for older clients, stateful with `enableJsonResponse: true`, and stateless
 * (`sessionIdGenerator: undefined`, one transport and server per POST, closed with the response, as the SDK's own
 * stateless leg does); for 2026-07-28 clients, `createMcpHandler` with `responseMode: 'json'`.
 */
async function serveMode(
  shop: Bookshop,
  mode: { stateless: boolean; json: boolean; modern?: boolean },
): Promise<string> {
  const sessions = new Map<string, WebStandardStreamableHTTPServerTransport>();
  // `responseMode: 'json'` warns on the console that progress is dropped: this test reads none.
  const warn = jest.spyOn(console, 'warn').mockImplementation(() => undefined);
  const modern = mode.modern ? createMcpHandler(() => shop(), { legacy: 'reject', responseMode: 'json' }) : undefined;
  warn.mockRestore();
  const server = http.createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const raw = Buffer.concat(chunks);
      const body: unknown = chunks.length > 0 ? JSON.parse(raw.toString('utf8')) : undefined;
      const request = webRequest(req, res, raw);
      if (modern) return sendResponse(res, await modern.fetch(request, { parsedBody: body }));
      if (mode.stateless) {
        if (req.method !== 'POST') {
          res.writeHead(405).end();
          return;
        }
        const mcp = shop();
        const transport = new WebStandardStreamableHTTPServerTransport({
          sessionIdGenerator: undefined,
          enableJsonResponse: mode.json,
        });
        res.on('close', () => {
          void transport.close();
          void mcp.close();
        });
        await mcp.connect(transport);
        return sendResponse(res, await transport.handleRequest(request, { parsedBody: body }));
      }
      const sessionId = req.headers['mcp-session-id'];
      const existing = typeof sessionId === 'string' ? sessions.get(sessionId) : undefined;
      if (existing) return sendResponse(res, await existing.handleRequest(request, { parsedBody: body }));
      if (!isInitializeRequest(body)) {
        res.writeHead(400).end();
        return;
      }
      const transport: WebStandardStreamableHTTPServerTransport = new WebStandardStreamableHTTPServerTransport({
        sessionIdGenerator: () => randomUUID(),
        enableJsonResponse: mode.json,
        onsessioninitialized: (id) => void sessions.set(id, transport),
      });
      await shop().connect(transport);
      await sendResponse(res, await transport.handleRequest(request, { parsedBody: body }));
    })().catch(() => res.destroy());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    await Promise.allSettled([...sessions.values()].map((t) => t.close()));
    await modern?.close();
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/mcp`;
}

describe('which Streamable HTTP modes keep a cancel (SDK 2.4.0)', () => {
  it('2026-07-28, JSON responses: the call\u2019s stream closed is its cancel, and it reaches the handler', async () => {
    const url = await serveMode(createBookshop(), { stateless: true, json: true, modern: true });
    const client = new Client({ name: 'bookshop-test', version: '0.0.0' }, { versionNegotiation: { mode: 'auto' } });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    cleanups.push(() => client.close());
    expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
    const { abort, done } = await startOrder(client, 'Hild');
    abort.abort('modern cancel');
    expect((await done).error?.message).toMatch(/modern cancel/);
    // No notification carries words on 2026-07-28: the handler hears that its exchange closed.
    expect((await waitFor({ event: 'cancelled', title: 'Hild' })).reason).toBe('Connection closed');
    await waitFor({ event: 'released', title: 'Hild' });
  });

  it('stateful with enableJsonResponse: the cancel reaches the handler', async () => {
    const url = await serveMode(createBookshop(), { stateless: false, json: true });
    const client = await connect(new StreamableHTTPClientTransport(new URL(url)));
    const { abort, done } = await startOrder(client, 'Kim');
    abort.abort('json mode cancel');
    expect((await done).error?.message).toMatch(/json mode cancel/);
    expect((await waitFor({ event: 'cancelled', title: 'Kim' })).reason).toBe('json mode cancel');
    await waitFor({ event: 'released', title: 'Kim' });
  });

  it.each([
    { name: 'SSE', json: false },
    { name: 'JSON', json: true },
  ])('stateless ($name responses): the cancel is lost and the handler runs to the end', async ({ json }) => {
    const url = await serveMode(createBookshop(), { stateless: true, json });
    const errors: string[] = [];
    const client = await connect(new StreamableHTTPClientTransport(new URL(url)), (err) => errors.push(err.message));
    const { abort, done } = await startOrder(client, 'Nostromo', 1500);
    const cancelledAt = Date.now();
    abort.abort('lost cancel');
    const { at, error } = await done;
    // The client stops waiting at once, as in every mode.
    expect(error?.message).toMatch(/lost cancel/);
    expect(at - cancelledAt).toBeLessThan(500);
    // The notification went to a fresh transport and server, which know no request with that id.
    const ordered = await waitFor({ event: 'ordered', title: 'Nostromo' }, 5000);
    expect(ordered.t - cancelledAt).toBeGreaterThan(1000);
    expect(received({ event: 'cancelled' })).toEqual([]);
    await eventually(() => errors.find((m) => /unknown message ID/.test(m)), 3000, 'the dropped answer');
  });
});
