/**
 * The plugin kit (`oz0/plugin`): the key store's once() (K1: one call, one key, one effect — across concurrency and
 * restarts), busy() as oz0 reads it (B1), progress with resume tokens and the resume request (P3), and the listing
 * declarations as oz0 reads them ("Words": may be made again).
 */
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client } from '@modelcontextprotocol/client';
import { InMemoryTransport, McpServer } from '@modelcontextprotocol/server';
import type { CallToolResult, ServerNotification } from '@modelcontextprotocol/server';
import Database from 'better-sqlite3';
import { z } from 'zod';
import {
  KeyBusyError,
  KeyReuseError,
  KeyStoreError,
  busy,
  idempotencyKey,
  idempotentWrite,
  isBusy,
  keyedTool,
  oneAttemptWrite,
  openKeyStore,
  progress,
  readKeyStore,
  readOnly,
  resumeRequest,
} from '../../plugin';
import type { KeyStore, KeyStoreOptions, ProgressExtra } from '../../plugin';
import { mayBeMadeAgain } from '../../activities/call/verdicts';
import { busyOf, resumeTokenOf } from '../../model/protocol';
import { checkTool } from '../../plugin/drill/listing-checks';

let dir: string;
let file: string;
let opened: Array<KeyStore<unknown>> = [];
beforeEach(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-plugin-'));
  file = path.join(dir, 'keys', 'store.db');
});
afterEach(async () => {
  await Promise.all(opened.map((s) => s.close()));
  opened = [];
  fs.rmSync(dir, { recursive: true, force: true });
});

/** openKeyStore, closed after the test. */
function open<T = CallToolResult>(at = file, opts?: KeyStoreOptions<T>): KeyStore<T> {
  const store = openKeyStore<T>(at, opts);
  opened.push(store as KeyStore<unknown>);
  return store;
}

const answer = (text: string): CallToolResult => ({ content: [{ type: 'text', text }] });

/** A fn that counts its runs and answers with the run number. */
function counted(): { runs: () => number; fn: () => Promise<CallToolResult> } {
  let runs = 0;
  return { runs: () => runs, fn: async () => answer(`run ${++runs}`) };
}

describe('K1: the key store runs a keyed call once', () => {
  test('K1: a seen key is answered with its first answer; equal arguments in another key order are the same', async () => {
    const store = open();
    const { runs, fn } = counted();
    const first = await store.once('job-1/c1', { a: 1, b: [1, 2] }, fn);
    const again = await store.once('job-1/c1', { b: [1, 2], a: 1 }, fn);
    expect(first).toEqual(answer('run 1'));
    expect(again).toEqual(first);
    expect(runs()).toBe(1);
    expect(readKeyStore(file)).toEqual([{ key: 'job-1/c1', args: { a: 1, b: [1, 2] }, answer: answer('run 1') }]);
  });

  test('K1: a seen key with other arguments, or with another function, is refused with a clear error', async () => {
    const store = open();
    const { runs, fn } = counted();
    await store.once('k', { amount: 5 }, fn, { tool: 'charge' });
    await expect(store.once('k', { amount: 6 }, fn, { tool: 'charge' })).rejects.toThrow(KeyReuseError);
    await expect(store.once('k', { amount: 6 }, fn, { tool: 'charge' })).rejects.toThrow(
      'idempotency key "k" was already used with other arguments (charge {"amount":5}); refusing charge {"amount":6}',
    );
    await expect(store.once('k', { amount: 5 }, fn, { tool: 'refund' })).rejects.toThrow(KeyReuseError);
    expect(runs()).toBe(1);
    expect(store.get('k')?.answer).toEqual(answer('run 1'));
  });

  test('K1: concurrent calls of one key run fn once and all get its answer; one with other arguments is refused', async () => {
    const store = open();
    let runs = 0;
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const fn = async () => {
      runs++;
      await gate;
      return answer('slow');
    };
    const calls = Array.from({ length: 10 }, () => store.once('k', { x: 1 }, fn));
    const other = store.once('k', { x: 2 }, fn);
    await expect(other).rejects.toThrow(KeyReuseError);
    release();
    expect(await Promise.all(calls)).toEqual(Array(10).fill(answer('slow')));
    expect(runs).toBe(1);
    expect(readKeyStore(file)).toHaveLength(1);
  });

  test('B1/B2: a caller that waits past waitMs for this process’s own run of its key (a handler that ignores its cancel) gets KeyBusyError; fn still runs once', async () => {
    const store = open(file, { waitMs: 100, retryAfterSeconds: 3 });
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let runs = 0;
    const fn = async () => {
      runs++;
      await gate;
      return answer('slow');
    };
    const first = store.once('k', {}, fn);
    const waiter = store.once('k', {}, fn);
    await expect(waiter).rejects.toThrow(KeyBusyError);
    await expect(waiter).rejects.toMatchObject({
      retryAfter: 3,
      message: expect.stringContaining(`pid ${process.pid}`),
    });
    release();
    expect(await first).toEqual(answer('slow'));
    expect(await store.once('k', {}, fn)).toEqual(answer('slow'));
    expect(runs).toBe(1);
  });

  test('K1: a fn that throws keeps nothing; the caller that waited for it runs fn in its place', async () => {
    const store = open();
    let runs = 0;
    const fn = async () => {
      runs++;
      await new Promise((r) => setTimeout(r, 20));
      if (runs === 1) throw new Error('cancelled before the write');
      return answer(`run ${runs}`);
    };
    const [first, second] = await Promise.allSettled([store.once('k', {}, fn), store.once('k', {}, fn)]);
    expect(first).toMatchObject({ status: 'rejected', reason: new Error('cancelled before the write') });
    expect(second).toEqual({ status: 'fulfilled', value: answer('run 2') });
    expect(runs).toBe(2);
    expect(await store.once('k', {}, fn)).toEqual(answer('run 2'));
    expect(readKeyStore(file).map((r) => r.answer)).toEqual([answer('run 2')]);
  });

  test('B1/B2: a busy answer is not kept, so the retry under the same key acts', async () => {
    const store = open();
    let runs = 0;
    const fn = async () => (++runs === 1 ? busy(2) : answer('done'));
    expect(isBusy(await store.once('k', {}, fn))).toBe(true);
    expect(await store.once('k', {}, fn)).toEqual(answer('done'));
    expect(readKeyStore(file)).toHaveLength(1);
  });

  test('K1: a restarted store (the file opened again) answers a seen key from disk, and refuses other arguments', async () => {
    const { runs, fn } = counted();
    const first = await open().once('k', { x: 1 }, fn, { tool: 'charge' });
    const restarted = open();
    expect(restarted.size).toBe(1);
    expect(await restarted.once('k', { x: 1 }, fn, { tool: 'charge' })).toEqual(first);
    await expect(restarted.once('k', { x: 2 }, fn, { tool: 'charge' })).rejects.toThrow(KeyReuseError);
    expect(runs()).toBe(1);
  });

  test('K1: a record is on disk when once() returns: a process killed with SIGKILL right after keeps it', () => {
    const kit = path.join(__dirname, '..', '..', 'dist', 'plugin', 'index.js');
    const script = `
      const { openKeyStore } = require(${JSON.stringify(kit)});
      openKeyStore(${JSON.stringify(file)})
        .once('k', { x: 1 }, () => ({ content: [{ type: 'text', text: 'charged' }] }))
        .then(() => process.kill(process.pid, 'SIGKILL'));
    `;
    const child = spawnSync(process.execPath, ['-e', script], { encoding: 'utf8' });
    expect(child.signal).toBe('SIGKILL');
    const { runs, fn } = counted();
    return open()
      .once('k', { x: 1 }, fn)
      .then((replayed) => {
        expect(replayed).toEqual(answer('charged'));
        expect(runs()).toBe(0);
      });
  });

  test('the writer thread never holds a process open: one that closes its store goes on after close(), one that does not exits when done', () => {
    const kit = path.join(__dirname, '..', '..', 'dist', 'plugin', 'index.js');
    const run = (close: boolean) =>
      spawnSync(
        process.execPath,
        [
          '-e',
          `const { openKeyStore } = require(${JSON.stringify(kit)});
           const store = openKeyStore(${JSON.stringify(file)});
           store.once('k', {}, () => 'done')
             .then(async (answer) => { ${close ? 'await store.close();' : ''} console.log(answer); });`,
        ],
        { encoding: 'utf8', timeout: 20_000 },
      );
    expect(run(true)).toMatchObject({ status: 0, stdout: 'done\n' });
    expect(run(false)).toMatchObject({ status: 0, stdout: 'done\n' });
  });

  test('K1: fn is told whether an earlier run of its key was interrupted; a fresh key is not', async () => {
    const store = open();
    const told: boolean[] = [];
    await store.once('k', {}, (run) => (told.push(run.interrupted), answer('done')));
    expect(told).toEqual([false]);
  });

  test('K1: a JSON-lines store of an earlier kit is migrated: its records imported, its torn last line dropped, the old file kept beside', async () => {
    const old = [
      { key: 'k1', tool: 'charge', args: { amount: 5 }, answer: answer('one') },
      { key: 'k2', args: {}, answer: answer('two') },
      // A later line for a key is not its answer: the first one given is.
      { key: 'k1', tool: 'charge', args: { amount: 5 }, answer: answer('never given') },
    ];
    const text = `${old.map((r) => JSON.stringify(r)).join('\n')}\n{"key":"k3","args":{},"ans`;
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, text);
    // Read as it is before anyone opens it.
    expect(readKeyStore(file)).toEqual(old);

    const store = open();
    expect(fs.readFileSync(file).subarray(0, 16).toString('latin1')).toBe('SQLite format 3\0');
    expect(fs.readFileSync(`${file}.before-sqlite`, 'utf8')).toBe(text);
    expect(store.records()).toEqual(old.slice(0, 2));
    const { runs, fn } = counted();
    expect(await store.once('k1', { amount: 5 }, fn, { tool: 'charge' })).toEqual(answer('one'));
    await expect(store.once('k1', { amount: 6 }, fn, { tool: 'charge' })).rejects.toThrow(KeyReuseError);
    // The torn line was never answered (its fsync had not returned): its key runs.
    expect(await store.once('k3', {}, fn)).toEqual(answer('run 1'));
    expect(runs()).toBe(1);
    expect(readKeyStore(file).map((r) => r.key)).toEqual(['k1', 'k2', 'k3']);
  });

  test('K1: an old store with a bad line in the middle is refused, and left as it was', () => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    fs.writeFileSync(file, `not json\n${JSON.stringify({ key: 'k1', args: {}, answer: answer('one') })}\n`);
    const before = fs.readFileSync(file);
    expect(() => open()).toThrow(KeyStoreError);
    expect(() => open()).toThrow(/store\.db:1: not a key store record/);
    expect(fs.readFileSync(file)).toEqual(before);
    expect(fs.existsSync(`${file}.before-sqlite`)).toBe(false);
  });

  test('K1: another program’s SQLite database is refused, not written to', () => {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const other = new Database(file);
    other.exec('CREATE TABLE t (x)');
    other.close();
    expect(() => open()).toThrow(/an SQLite database, but not an oz0 key store/);
    expect(() => readKeyStore(file)).toThrow(KeyStoreError);
  });
});

describe('K1: keyedTool honours the key in a tool handler', () => {
  async function connect(server: McpServer): Promise<Client> {
    const [a, b] = InMemoryTransport.createLinkedPair();
    await server.connect(b);
    const client = new Client({ name: 'plugin-test', version: '0.0.0' });
    await client.connect(a);
    return client;
  }

  test('K1: through McpServer: once per key, refused without a key or with other arguments; the listing says so', async () => {
    const store = open();
    let charges = 0;
    const server = new McpServer({ name: 'kit', version: '0.0.0' });
    server.registerTool(
      'charge',
      { inputSchema: z.object({ amount: z.number() }), ...idempotentWrite() },
      keyedTool(store, 'charge', async (args: { amount: number }, _extra, key) =>
        answer(`charged ${args.amount} (#${++charges}, ${key})`),
      ),
    );
    const client = await connect(server);
    const meta = (key: string) => ({ _meta: { 'oz0/idempotency_key': key } });
    const first = await client.callTool({ name: 'charge', arguments: { amount: 5 }, ...meta('j/c1') });
    const again = await client.callTool({ name: 'charge', arguments: { amount: 5 }, ...meta('j/c1') });
    const other = await client.callTool({ name: 'charge', arguments: { amount: 6 }, ...meta('j/c1') });
    const none = await client.callTool({ name: 'charge', arguments: { amount: 5 } });
    expect(first).toEqual({ content: [{ type: 'text', text: 'charged 5 (#1, j/c1)' }] });
    expect(again).toEqual(first);
    expect(other).toMatchObject({ isError: true, content: [{ text: expect.stringContaining('other arguments') }] });
    expect(none).toEqual({
      isError: true,
      content: [{ type: 'text', text: 'charge needs _meta["oz0/idempotency_key"]' }],
    });
    expect(charges).toBe(1);
    const [tool] = (await client.listTools()).tools;
    expect(tool.annotations).toEqual({ idempotentHint: true, destructiveHint: false });
    expect(tool._meta).toEqual({ 'oz0/idempotency_key': true });
    await client.close();
  });

  test('K1: idempotencyKey reads a string key only', () => {
    expect(idempotencyKey({ _meta: { 'oz0/idempotency_key': 'j/s1/set_status#00/1' } })).toBe('j/s1/set_status#00/1');
    expect(idempotencyKey({ _meta: { 'oz0/idempotency_key': 5 } })).toBeUndefined();
    expect(idempotencyKey({ _meta: { 'oz0/idempotency_key': '' } })).toBeUndefined();
    expect(idempotencyKey({ _meta: { 'oz0/idempotency_key': 'x'.repeat(2000) } })).toBeUndefined();
    expect(idempotencyKey({})).toBeUndefined();
  });
});

describe('B1: busy()', () => {
  test('B1: an error result with oz0/retryable and oz0/retry_after, as oz0 reads it', () => {
    const result = busy(2.5, 'The billing API is busy (429)');
    expect(result).toEqual({
      content: [{ type: 'text', text: 'The billing API is busy (429)' }],
      isError: true,
      _meta: { 'oz0/retryable': true, 'oz0/retry_after': 2.5 },
    });
    expect(busyOf(result)).toEqual({ retryAfter: 2.5 });
    expect(busyOf(busy())).toEqual({});
    expect(busy()._meta).toEqual({ 'oz0/retryable': true });
    expect(isBusy(busy())).toBe(true);
    expect(isBusy(answer('fine'))).toBe(false);
  });

  test.each([-1, Number.NaN, Infinity])('B1: a wait of %s seconds is a bug, and throws', (wait) => {
    expect(() => busy(wait)).toThrow(RangeError);
  });
});

describe('P3: progress with a resume token, and the resume request', () => {
  function extra(meta?: Record<string, unknown>): ProgressExtra & { sent: ServerNotification[] } {
    const sent: ServerNotification[] = [];
    return {
      _meta: meta,
      sent,
      sendNotification: async (n: ServerNotification) => {
        sent.push(n);
      },
    };
  }

  test('P3: progress carries the token in _meta["oz0/resume"], which oz0 takes as valid', async () => {
    const e = extra({ progressToken: 'p1' });
    await progress(e, 2, 4, 'shard:2');
    await progress(e, 3);
    expect(e.sent).toEqual([
      {
        method: 'notifications/progress',
        params: { progressToken: 'p1', progress: 2, total: 4, _meta: { 'oz0/resume': 'shard:2' } },
      },
      { method: 'notifications/progress', params: { progressToken: 'p1', progress: 3 } },
    ]);
    expect(resumeTokenOf((e.sent[0].params as { _meta?: unknown })._meta)).toEqual({ token: 'shard:2' });
  });

  test('P3: progress and resumeRequest read the v2 SDK’s handler context (ctx.mcpReq) as they read 1.x’s extra', async () => {
    const sent: unknown[] = [];
    const ctx = {
      mcpReq: {
        _meta: { progressToken: 'p2', 'oz0/resume': { token: 'shard:1', progress: 1 } },
        notify: async (n: unknown) => void sent.push(n),
      },
    };
    await progress(ctx, 2, 4, 'shard:2');
    expect(sent).toEqual([
      {
        method: 'notifications/progress',
        params: { progressToken: 'p2', progress: 2, total: 4, _meta: { 'oz0/resume': 'shard:2' } },
      },
    ]);
    expect(resumeRequest(ctx)).toEqual({ token: 'shard:1', progress: 1 });
    expect(idempotencyKey({ mcpReq: { _meta: { 'oz0/idempotency_key': 'j/c1' } } })).toBe('j/c1');
  });

  test('P1: no progress is sent when the request asked for none', async () => {
    const e = extra({});
    await progress(e, 1, 2, 'a');
    expect(e.sent).toEqual([]);
  });

  test.each([['has space'], [''], ['x'.repeat(257)], ['é']])(
    'P3: a token that breaks the rule (%j) throws',
    async (t) => {
      await expect(progress(extra({ progressToken: 1 }), 1, 2, t)).rejects.toThrow(RangeError);
    },
  );

  test('P3: resumeRequest reads { token, progress }, and nothing that is not a valid one', () => {
    expect(resumeRequest({ _meta: { 'oz0/resume': { token: 'shard:2', progress: 2 } } })).toEqual({
      token: 'shard:2',
      progress: 2,
    });
    expect(resumeRequest({})).toBeUndefined();
    expect(resumeRequest({ _meta: { 'oz0/resume': 'shard:2' } })).toBeUndefined();
    expect(resumeRequest({ _meta: { 'oz0/resume': { token: 'bad token', progress: 2 } } })).toBeUndefined();
    expect(resumeRequest({ _meta: { 'oz0/resume': { token: 'ok', progress: -1 } } })).toBeUndefined();
    expect(resumeRequest({ _meta: { 'oz0/resume': { token: 'ok' } } })).toBeUndefined();
  });
});

describe('Words: the listing declarations', () => {
  const tool = (name: string, d: { annotations: object; _meta?: Record<string, unknown> }) => ({
    name,
    inputSchema: { type: 'object' as const },
    ...d,
  });

  test('Words: idempotentWrite() sets the hint and the key together: oz0 may make it again', () => {
    expect(idempotentWrite()).toEqual({
      annotations: { idempotentHint: true, destructiveHint: false },
      _meta: { 'oz0/idempotency_key': true },
    });
    expect(idempotentWrite({ openWorld: true, resume: true })).toEqual({
      annotations: { idempotentHint: true, destructiveHint: false, openWorldHint: true },
      _meta: { 'oz0/idempotency_key': true, 'oz0/resume': true },
    });
    expect(mayBeMadeAgain(idempotentWrite(), 'plugin', false)).toBe(true);
  });

  test('Words: readOnly() may be made again; with resume it says oz0/resume', () => {
    expect(readOnly()).toEqual({ annotations: { readOnlyHint: true } });
    expect(readOnly({ resume: true, openWorld: false })).toEqual({
      annotations: { readOnlyHint: true, openWorldHint: false },
      _meta: { 'oz0/resume': true },
    });
    expect(mayBeMadeAgain(readOnly(), 'plugin', false)).toBe(true);
  });

  test('Words: oneAttemptWrite() gets one attempt', () => {
    expect(oneAttemptWrite()).toEqual({
      annotations: { readOnlyHint: false, idempotentHint: false, destructiveHint: true },
    });
    expect(mayBeMadeAgain(oneAttemptWrite({ destructive: false }), 'plugin', false)).toBe(false);
  });

  test('Words: every declaration the kit makes passes oz0 plugin test’s listing checks', () => {
    expect(checkTool(tool('w', idempotentWrite()), 'plugin')).toEqual([]);
    expect(checkTool(tool('r', readOnly()), 'plugin')).toEqual([]);
    expect(checkTool(tool('r', readOnly({ resume: true })), 'remote')).toEqual([]);
    expect(checkTool(tool('o', oneAttemptWrite()), 'plugin')).toEqual([]);
  });
});

test('T4: two stores on one file (two nodes’ servers; test/integration/key-store.test.ts races real processes) never both act on a key', async () => {
  const file = path.join(dir, 'keys.db');
  // Both opened before either wrote, as two nodes' ledgers started at different times.
  const a = open<string>(file);
  const b = open<string>(file);
  let runs = 0;
  const act = async () => `done ${++runs}`;
  expect(await a.once('job/s1/charge#x/1', { amount: 1 }, act)).toBe('done 1');
  expect(await b.once('job/s1/charge#x/1', { amount: 1 }, act)).toBe('done 1');
  expect(runs).toBe(1);
  expect(await b.once('job/s1/charge#y/1', { amount: 2 }, act)).toBe('done 2');
  expect(await a.once('job/s1/charge#y/1', { amount: 2 }, act)).toBe('done 2');
  await expect(a.once('job/s1/charge#y/1', { amount: 3 }, act)).rejects.toThrow('other arguments');
  expect(runs).toBe(2);
  expect(readKeyStore(file)).toHaveLength(2);
});
