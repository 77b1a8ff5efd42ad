import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, InMemoryTransport, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import type { CallToolResult, Progress } from '@modelcontextprotocol/client';
import { IDEMPOTENCY_KEY_META, readReceived, serveHttp } from '../../examples/common';
import type { HttpHandle, ServerFactory } from '../../examples/common';
import { createLedger } from '../../examples/ledger';
import { createReader } from '../../examples/reader';

jest.setTimeout(20_000);

let tmp: string;
let receivedLog: string;
const cleanups: Array<() => Promise<void>> = [];

beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-examples-'));
  receivedLog = path.join(tmp, 'received.jsonl');
  process.env.OZ0_RECEIVED_LOG = receivedLog;
});

afterEach(async () => {
  // Clients first, then servers, so no handler is left writing to a closed transport.
  for (const cleanup of cleanups.splice(0).reverse()) await cleanup();
  delete process.env.OZ0_RECEIVED_LOG;
  fs.rmSync(tmp, { recursive: true, force: true });
});

/** Connects a real Client to a server from `factory` over an in-memory pair. */
async function connect(factory: ServerFactory): Promise<Client> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const server = factory();
  await server.connect(serverSide);
  const client = new Client({ name: 'examples-test', version: '0.0.0' });
  await client.connect(clientSide);
  cleanups.push(() => server.close());
  cleanups.push(() => client.close());
  // Listing tools lets the client validate structuredContent against each outputSchema, as a real caller would.
  await client.listTools();
  return client;
}

function keyed(key: string): { _meta: Record<string, unknown> } {
  return { _meta: { [IDEMPOTENCY_KEY_META]: key } };
}

function text(result: unknown): string {
  const content = (result as CallToolResult).content;
  return content.map((c) => (c.type === 'text' ? c.text : '')).join('');
}

/** Polls until `pick` returns something, failing after `ms`. */
async function eventually<T>(pick: () => T | undefined, ms = 5000, what = 'condition'): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = pick();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms}ms waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function findReceived(match: Record<string, unknown>): Record<string, unknown> | undefined {
  return readReceived(receivedLog).find((r) => Object.entries(match).every(([k, v]) => r[k] === v));
}

describe('ledger', () => {
  let file: string;
  beforeEach(() => {
    file = path.join(tmp, 'nested', 'ledger.db');
  });

  async function effects(
    client: Client,
  ): Promise<{ charges: number; statuses: number; by_key: Record<string, number> }> {
    const result = await client.callTool({ name: 'count_effects', arguments: {} });
    return result.structuredContent as { charges: number; statuses: number; by_key: Record<string, number> };
  }

  it('answers a repeated key with the stored answer and charges once', async () => {
    const client = await connect(createLedger({ file }));
    const first = await client.callTool({ name: 'charge', arguments: { order_id: 'o1', amount: 5 }, ...keyed('k1') });
    // Same arguments in another key order are the same arguments.
    const again = await client.callTool({ name: 'charge', arguments: { amount: 5, order_id: 'o1' }, ...keyed('k1') });
    expect(first.isError).toBeFalsy();
    expect(text(first)).toBe('charged 5 to o1 (ch-1)');
    expect(first.structuredContent).toEqual({ charge_id: 'ch-1', order_id: 'o1', amount: 5 });
    expect(again).toEqual(first);
    expect(await effects(client)).toEqual({ charges: 1, refunds: 0, statuses: 0, by_key: { k1: 1 } });
    const got = readReceived(receivedLog).filter((r) => r.tool === 'charge');
    expect(got.map((r) => r.key)).toEqual(['k1', 'k1']);
  });

  it('refuses a key reused with other arguments, and a call without a key', async () => {
    const client = await connect(createLedger({ file }));
    await client.callTool({ name: 'charge', arguments: { order_id: 'o1', amount: 5 }, ...keyed('k1') });
    const other = await client.callTool({ name: 'charge', arguments: { order_id: 'o1', amount: 6 }, ...keyed('k1') });
    expect(other.isError).toBe(true);
    expect(text(other)).toMatch(/already used with other arguments/);
    const unkeyed = await client.callTool({ name: 'charge', arguments: { order_id: 'o1', amount: 5 } });
    expect(unkeyed.isError).toBe(true);
    expect(text(unkeyed)).toBe('charge needs _meta["oz0/idempotency_key"]');
    expect((await effects(client)).charges).toBe(1);
  });

  it('charges once per key and counts statuses', async () => {
    const client = await connect(createLedger({ file }));
    const a = await client.callTool({ name: 'charge', arguments: { order_id: 'o1', amount: 5 }, ...keyed('k1') });
    const b = await client.callTool({ name: 'charge', arguments: { order_id: 'o1', amount: 5 }, ...keyed('k2') });
    expect(text(a)).toBe('charged 5 to o1 (ch-1)');
    expect(text(b)).toBe('charged 5 to o1 (ch-2)');
    const status = await client.callTool({
      name: 'set_status',
      arguments: { id: 'o1', status: 'paid' },
      ...keyed('s1'),
    });
    expect(text(status)).toBe('o1 is paid');
    expect(await effects(client)).toEqual({ charges: 2, refunds: 0, statuses: 1, by_key: { k1: 1, k2: 1, s1: 1 } });
  });

  it('still answers an old key after a restart on the same file', async () => {
    const before = await connect(createLedger({ file }));
    const first = await before.callTool({ name: 'charge', arguments: { order_id: 'o1', amount: 5 }, ...keyed('k1') });
    const after = await connect(createLedger({ file }));
    const replayed = await after.callTool({ name: 'charge', arguments: { order_id: 'o1', amount: 5 }, ...keyed('k1') });
    expect(replayed).toEqual(first);
    // Numbering continues from the file, not from zero.
    const next = await after.callTool({ name: 'charge', arguments: { order_id: 'o2', amount: 1 }, ...keyed('k2') });
    expect(text(next)).toBe('charged 1 to o2 (ch-2)');
    expect(await effects(after)).toEqual({ charges: 2, refunds: 0, statuses: 0, by_key: { k1: 1, k2: 1 } });
  });

  it('takes over a JSON-lines ledger of an earlier version: its charges kept, numbering going on', async () => {
    const charged = {
      content: [{ type: 'text', text: 'charged 5 to o1 (ch-1)' }],
      structuredContent: { charge_id: 'ch-1', order_id: 'o1', amount: 5 },
    };
    fs.mkdirSync(path.dirname(file), { recursive: true });
    // The old format's last line torn by a kill mid-append: that charge was never answered.
    fs.writeFileSync(
      file,
      `${JSON.stringify({ key: 'k1', tool: 'charge', args: { order_id: 'o1', amount: 5 }, answer: charged })}\n` +
        '{"key":"k2","tool":"cha',
    );
    const client = await connect(createLedger({ file }));
    const replayed = await client.callTool({
      name: 'charge',
      arguments: { order_id: 'o1', amount: 5 },
      ...keyed('k1'),
    });
    expect(replayed).toEqual(charged);
    const next = await client.callTool({ name: 'charge', arguments: { order_id: 'o2', amount: 1 }, ...keyed('k2') });
    expect(text(next)).toBe('charged 1 to o2 (ch-2)');
    expect(await effects(client)).toEqual({ charges: 2, refunds: 0, statuses: 0, by_key: { k1: 1, k2: 1 } });
    expect(fs.existsSync(`${file}.before-sqlite`)).toBe(true);
  });

  it('writes nothing for a cancelled slow_charge and records the reason', async () => {
    const client = await connect(createLedger({ file }));
    const abort = new AbortController();
    const call = client.callTool(
      { name: 'slow_charge', arguments: { order_id: 'o1', amount: 5, ms: 10_000 }, ...keyed('k1') },
      { signal: abort.signal },
    );
    await eventually(() => findReceived({ tool: 'slow_charge', key: 'k1' }), 5000, 'slow_charge to start');
    abort.abort('operator stopped it');
    await expect(call).rejects.toThrow(/operator stopped it/);
    const cancelled = await eventually(() => findReceived({ event: 'cancelled', tool: 'slow_charge' }));
    expect(cancelled).toMatchObject({ key: 'k1', reason: 'operator stopped it' });
    expect(findReceived({ event: 'aborted', tool: 'slow_charge' })).toMatchObject({ reason: 'operator stopped it' });
    expect((await effects(client)).charges).toBe(0);
  });
});

describe('reader', () => {
  let stateFile: string;
  beforeEach(() => {
    stateFile = path.join(tmp, 'reader-seen.json');
  });

  it('reports progress per page when the call sends a progressToken', async () => {
    const client = await connect(createReader({ stateFile }));
    const progress: Progress[] = [];
    const result = await client.callTool(
      { name: 'read_pages', arguments: { pages: 3, page_ms: 5 }, ...keyed('r1') },
      { onprogress: (p) => progress.push(p) },
    );
    expect(text(result)).toBe('read 3 pages');
    expect(result.structuredContent).toEqual({ pages: 3 });
    expect(progress).toEqual([1, 2, 3].map((i) => ({ progress: i, total: 3, message: `page ${i}` })));
    const got = findReceived({ tool: 'read_pages' });
    expect(got).toMatchObject({ key: 'r1', args: { pages: 3, page_ms: 5 } });
    expect(got?.progressToken).toBeDefined();
  });

  it('sends no progress without a progressToken', async () => {
    const client = await connect(createReader({ stateFile }));
    const result = await client.callTool({ name: 'read_pages', arguments: { pages: 2, page_ms: 1 } });
    expect(text(result)).toBe('read 2 pages');
    expect(findReceived({ tool: 'read_pages' })?.progressToken).toBeUndefined();
  });

  it('fails the first attempt of a key on purpose and lets the retry through', async () => {
    const client = await connect(createReader({ stateFile }));
    const call = { name: 'read_pages', arguments: { pages: 2, page_ms: 1, fail_first_attempt: true }, ...keyed('f1') };
    const first = await client.callTool(call);
    // McpServer turns the thrown ProtocolError into a tool error result: its message, as the SDK 2.x words it.
    expect(first.isError).toBe(true);
    expect(text(first)).toBe('first attempt fails on purpose');
    const retry = await client.callTool(call);
    expect(retry.isError).toBeFalsy();
    expect(text(retry)).toBe('read 2 pages');
    // The seen-set is on disk, so a restarted server lets the retry through too.
    const restarted = await connect(createReader({ stateFile }));
    expect((await restarted.callTool(call)).isError).toBeFalsy();
  });

  it('echoes', async () => {
    const client = await connect(createReader({ stateFile }));
    expect(text(await client.callTool({ name: 'echo', arguments: { text: 'hi' }, ...keyed('e1') }))).toBe('hi');
    expect(findReceived({ tool: 'echo' })).toMatchObject({ key: 'e1', args: { text: 'hi' } });
  });

  it('records a cancelled sleep with the cancellation reason', async () => {
    const client = await connect(createReader({ stateFile }));
    const abort = new AbortController();
    const call = client.callTool({ name: 'sleep', arguments: { ms: 10_000 } }, { signal: abort.signal });
    const start = await eventually(() => findReceived({ tool: 'sleep', event: 'start' }), 5000, 'sleep to start');
    abort.abort('user pressed stop');
    await expect(call).rejects.toThrow(/user pressed stop/);
    const cancelled = await eventually(() => findReceived({ tool: 'sleep', event: 'cancelled' }), 5000, 'cancel');
    expect(cancelled).toMatchObject({ reason: 'user pressed stop', requestId: start.requestId });
  });

  it('lists the hints oz0 reads', async () => {
    const client = await connect(createReader({ stateFile }));
    const { tools } = await client.listTools();
    const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
    expect(byName.read_pages.annotations).toMatchObject({ readOnlyHint: true, openWorldHint: false });
    expect(byName.sleep.annotations).toBeUndefined();
    const ledger = await connect(createLedger({ file: path.join(tmp, 'ledger.db') }));
    const charge = (await ledger.listTools()).tools.find((t) => t.name === 'charge');
    expect(charge?.annotations).toMatchObject({ idempotentHint: true, destructiveHint: false, openWorldHint: true });
    expect(charge?._meta).toEqual({ [IDEMPOTENCY_KEY_META]: true });
  });
});

describe('serveHttp', () => {
  let http: HttpHandle;
  beforeEach(async () => {
    http = await serveHttp(createReader({ stateFile: path.join(tmp, 'reader-seen.json') }), 0);
    cleanups.push(() => http.close());
  });

  async function httpClient(url: string): Promise<{ client: Client; transport: StreamableHTTPClientTransport }> {
    const transport = new StreamableHTTPClientTransport(new URL(url));
    const client = new Client({ name: 'examples-http-test', version: '0.0.0' });
    await client.connect(transport);
    cleanups.push(() => client.close());
    return { client, transport };
  }

  it('round-trips a call and cancels a sleep over HTTP', async () => {
    expect(http.url).toBe(`http://127.0.0.1:${http.port}/mcp`);
    const { client, transport } = await httpClient(http.url);
    expect(transport.sessionId).toBeDefined();
    expect(text(await client.callTool({ name: 'echo', arguments: { text: 'over http' } }))).toBe('over http');

    const abort = new AbortController();
    const call = client.callTool({ name: 'sleep', arguments: { ms: 10_000 } }, { signal: abort.signal });
    await eventually(() => findReceived({ tool: 'sleep', event: 'start' }), 5000, 'sleep to start');
    abort.abort('cancelled over http');
    await expect(call).rejects.toThrow(/cancelled over http/);
    const cancelled = await eventually(() => findReceived({ tool: 'sleep', event: 'cancelled' }), 5000, 'cancel');
    expect(cancelled.reason).toBe('cancelled over http');

    // The session still works after a cancel, and DELETE ends it.
    expect(text(await client.callTool({ name: 'echo', arguments: { text: 'still here' } }))).toBe('still here');
    const sessionId = transport.sessionId!;
    await transport.terminateSession();
    const gone = await fetch(http.url, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json, text/event-stream',
        'mcp-session-id': sessionId,
      },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(gone.status).toBe(404);
    expect(await gone.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32001 } });
  });

  it('serves a 2026-07-28 client on the same endpoint: no session, and a call’s stream closed is its cancel', async () => {
    const transport = new StreamableHTTPClientTransport(new URL(http.url));
    const client = new Client(
      { name: 'examples-http-test', version: '0.0.0' },
      { versionNegotiation: { mode: 'auto' } },
    );
    await client.connect(transport);
    cleanups.push(() => client.close());
    expect(client.getNegotiatedProtocolVersion()).toBe('2026-07-28');
    expect(transport.sessionId).toBeUndefined();
    expect(text(await client.callTool({ name: 'echo', arguments: { text: 'modern' } }))).toBe('modern');

    const abort = new AbortController();
    const call = client.callTool({ name: 'sleep', arguments: { ms: 10_000 } }, { signal: abort.signal });
    await eventually(() => findReceived({ tool: 'sleep', event: 'start' }), 5000, 'sleep to start');
    abort.abort('cancelled over 2026-07-28');
    await expect(call).rejects.toThrow(/cancelled over 2026-07-28/);
    // No notification carries words on 2026-07-28: the handler hears that its exchange closed.
    const cancelled = await eventually(() => findReceived({ tool: 'sleep', event: 'cancelled' }), 5000, 'cancel');
    expect(cancelled.reason).toBe('Connection closed');
  });

  it('refuses a POST without a session that is not initialize, and other paths', async () => {
    const noSession = await fetch(http.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    expect(noSession.status).toBe(400);
    expect(await noSession.json()).toMatchObject({ jsonrpc: '2.0', error: { code: -32000 } });
    const elsewhere = await fetch(http.url.replace('/mcp', '/other'));
    expect(elsewhere.status).toBe(404);
    await elsewhere.body?.cancel();
  });

  it('shares state between sessions through the factory closure', async () => {
    const ledger = await serveHttp(createLedger({ file: path.join(tmp, 'ledger.db') }), 0);
    cleanups.push(() => ledger.close());
    const one = await httpClient(ledger.url);
    const two = await httpClient(ledger.url);
    expect(one.transport.sessionId).not.toBe(two.transport.sessionId);
    const args = { name: 'charge', arguments: { order_id: 'o1', amount: 7 }, ...keyed('h1') };
    const a = await one.client.callTool(args);
    const b = await two.client.callTool(args);
    expect(b).toEqual(a);
    const counted = await two.client.callTool({ name: 'count_effects', arguments: {} });
    expect(counted.structuredContent).toMatchObject({ charges: 1, by_key: { h1: 1 } });
  });

  it('close() ends sessions with calls in flight', async () => {
    const { client } = await httpClient(http.url);
    const call = client.callTool({ name: 'sleep', arguments: { ms: 10_000 } }, { timeout: 1000 });
    const settled = call.then(
      () => 'answered',
      (err: Error) => err.message,
    );
    await eventually(() => findReceived({ tool: 'sleep', event: 'start' }), 5000, 'sleep to start');
    const closed = Date.now();
    await http.close();
    expect(Date.now() - closed).toBeLessThan(5000);
    // The handler's signal is aborted with the SDK's ConnectionClosed when its session closes.
    const cancelled = await eventually(() => findReceived({ tool: 'sleep', event: 'cancelled' }), 5000, 'cancel');
    expect(cancelled.reason).toBe('Connection closed');
    expect(await settled).toMatch(/Connection closed|Request timed out/);
  });
});
