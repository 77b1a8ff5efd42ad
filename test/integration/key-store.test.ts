/**
 * The plugin kit's key store shared by real processes (K1 across processes; T4's lost node whose attempt runs on):
 * long-lived processes on one file race on a fresh key each round and run fn once between them; a process killed
 * with SIGKILL between its run and its record leaves a claim that the next caller takes over, told so; a live owner
 * is waited for, and past the bound answered busy (B1/B2); an owner that cannot be looked up goes stale; and the
 * writes never stall the event loop. The processes are test/fixtures/store-racer.js, on the compiled kit (dist/).
 */
import { fork } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import Database from 'better-sqlite3';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { KeyBusyError, keyedTool, openKeyStore, readKeyStore } from '../../plugin';
import type { KeyStore, KeyStoreOptions } from '../../plugin';
import { busyOf } from '../../model/protocol';

const RACER = path.join(__dirname, '..', 'fixtures', 'store-racer.js');
const PROCESSES = 6;
const ROUNDS = 100;

interface Reply {
  id: number;
  ran?: boolean;
  interrupted?: boolean;
  answer?: CallToolResult;
  error?: { name: string; message: string; retryAfter?: number };
}

interface OnceMessage {
  key: string;
  args?: unknown;
  /** When to call once (ms since 1970): every process starts together. */
  at?: number;
  fnMs?: number;
  hold?: boolean;
  effects?: string;
}

/** One store-racer process: once() calls as messages, their replies as promises. */
class Racer {
  private nextId = 0;
  private readonly running = new Map<number, () => void>();
  private readonly done = new Map<number, { resolve: (reply: Reply) => void; reject: (err: Error) => void }>();
  readonly exited: Promise<void>;

  constructor(
    readonly child: ChildProcess,
    readonly pid: number,
  ) {
    child.on('message', (msg: Reply & { running?: boolean }) => {
      if (msg.running) this.running.get(msg.id)?.();
      else this.done.get(msg.id)?.resolve(msg);
    });
    this.exited = new Promise((resolve) => child.once('exit', () => resolve()));
    // A process that dies with calls in flight fails them, rather than leave the test waiting.
    void this.exited.then(() => this.done.forEach((d) => d.reject(new Error(`store-racer ${pid} exited`))));
  }

  once(msg: OnceMessage): { id: number; running: Promise<void>; done: Promise<Reply> } {
    const id = ++this.nextId;
    const running = new Promise<void>((resolve) => this.running.set(id, resolve));
    const done = new Promise<Reply>((resolve, reject) => this.done.set(id, { resolve, reject }));
    // The killed processes' calls never answer: that is not an unhandled rejection.
    done.catch(() => undefined);
    this.child.send({ op: 'once', id, at: 0, args: {}, ...msg });
    return { id, running, done };
  }

  finish(id: number): void {
    this.child.send({ op: 'finish', id });
  }
}

/** Every process started, so that afterAll stops them all, even those of a test that failed midway. */
const children: ChildProcess[] = [];

function startRacer(file: string, env: Record<string, string> = {}): Promise<Racer> {
  const child = fork(RACER, [file], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  children.push(child);
  return new Promise((resolve, reject) => {
    child.once('message', (msg: { ready?: boolean; pid: number }) => resolve(new Racer(child, msg.pid)));
    child.once('exit', (code) => reject(new Error(`store-racer exited ${code} before it was ready`)));
  });
}

const text = (t: string): CallToolResult => ({ content: [{ type: 'text', text: t }] });
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let dir: string;
let file: string;
let effects: string;
let racers: Racer[] = [];
const stores: KeyStore[] = [];

/** A store in this process (the kit from its TypeScript source), closed after the file's tests. */
function open(opts: KeyStoreOptions<CallToolResult> = {}): KeyStore {
  const store = openKeyStore(file, opts);
  stores.push(store);
  return store;
}

function effectsOf(key: string): unknown[] {
  if (!fs.existsSync(effects)) return [];
  return fs
    .readFileSync(effects, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((line) => JSON.parse(line) as { key: string })
    .filter((e) => e.key === key);
}

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-key-store-'));
  file = path.join(dir, 'shared.db');
  effects = path.join(dir, 'effects.jsonl');
  // The file starts as an earlier kit's JSON-lines store: every process opens it at once, and one migrates it.
  fs.writeFileSync(file, `${JSON.stringify({ key: 'job-old/c1', tool: 'race', args: {}, answer: text('old') })}\n`);
  racers = await Promise.all(Array.from({ length: PROCESSES }, () => startRacer(file)));
});

afterAll(async () => {
  const exits = children
    .filter((c) => c.exitCode === null && c.signalCode === null)
    .map((c) => new Promise((resolve) => c.once('exit', resolve)));
  for (const child of children) child.kill('SIGKILL');
  await Promise.all(exits);
  await Promise.all(stores.map((s) => s.close()));
  fs.rmSync(dir, { recursive: true, force: true });
});

test('K1: processes opening an old JSON-lines store together migrate it once; its key is answered, not run', async () => {
  expect(
    fs
      .readdirSync(dir)
      .filter((f) => f.startsWith('shared.db.'))
      .sort(),
  ).toEqual(['shared.db.before-sqlite', 'shared.db.migration-lock']);
  const replies = await Promise.all(racers.map((r) => r.once({ key: 'job-old/c1' }).done));
  expect(replies.map((r) => [r.ran, r.answer])).toEqual(racers.map(() => [false, text('old')]));
});

test(`K1: ${PROCESSES} processes released together on a fresh key, ${ROUNDS} rounds: fn runs once per key, every process gets its answer`, async () => {
  for (let round = 0; round < ROUNDS; round++) {
    const key = `job-race/r${round}`;
    const at = Date.now() + 20;
    // Some rounds answer at once, some after a while: the others find a record, or a live claim to wait for.
    const fnMs = (round % 4) * 5;
    const replies = await Promise.all(racers.map((r) => r.once({ key, args: { round }, at, fnMs }).done));
    const runs = replies.filter((r) => r.ran).length;
    const answers = new Set(replies.map((r) => JSON.stringify(r.answer ?? r.error)));
    expect({ round, runs, answers: [...answers] }).toEqual({
      round,
      runs: 1,
      answers: [JSON.stringify(text(`done ${key} by ${racers[replies.findIndex((r) => r.ran)].pid}`))],
    });
  }
  // What the store recorded: one record per key, and no claim left behind.
  const raced = readKeyStore(file).filter((r) => r.key.startsWith('job-race/'));
  expect(raced).toHaveLength(ROUNDS);
  expect(new Set(raced.map((r) => r.key)).size).toBe(ROUNDS);
  const db = new Database(file, { readonly: true });
  expect(db.prepare(`SELECT count(*) AS n FROM claims`).get()).toEqual({ n: 0 });
  db.close();
});

test('K1: a process killed with SIGKILL after fn acted and before its record: the next caller is told interrupted, finds the effect, and nothing is done or recorded twice', async () => {
  const victim = await startRacer(file);
  const key = 'job-crash/c1';
  const held = victim.once({ key, hold: true, effects });
  await held.running;
  expect(effectsOf(key)).toHaveLength(1);
  victim.child.kill('SIGKILL');
  await victim.exited;

  const next = await racers[0].once({ key, effects }).done;
  expect(next).toMatchObject({ ran: true, interrupted: true, answer: text(`done ${key} by ${victim.pid}`) });
  expect(effectsOf(key)).toHaveLength(1);
  const again = await racers[1].once({ key, effects }).done;
  expect(again).toMatchObject({ ran: false, answer: next.answer });
  expect(readKeyStore(file).filter((r) => r.key === key)).toEqual([
    { key, tool: 'race', args: {}, answer: next.answer },
  ]);
});

test('K1: a process killed with SIGKILL before fn acted: the next caller is told interrupted, finds no effect, and acts once', async () => {
  const victim = await startRacer(file);
  const key = 'job-crash/c2';
  // No effects file for the victim: it claimed the key and died before its write.
  const held = victim.once({ key, hold: true });
  await held.running;
  victim.child.kill('SIGKILL');
  await victim.exited;

  const next = await racers[2].once({ key, effects }).done;
  expect(next).toMatchObject({ ran: true, interrupted: true, answer: text(`done ${key} by ${racers[2].pid}`) });
  expect(effectsOf(key)).toHaveLength(1);
  expect(readKeyStore(file).filter((r) => r.key === key)).toHaveLength(1);
});

test('K1: a live owner in another process is waited for, and its answer is the waiter’s; fn does not run here', async () => {
  const key = 'job-wait/c1';
  const held = racers[0].once({ key, hold: true });
  await held.running;
  const store = open({ waitMs: 5000 });
  let runs = 0;
  const waiting = store.once(key, {}, () => text(`run ${++runs}`), { tool: 'race' });
  await sleep(300);
  racers[0].finish(held.id);
  expect(await waiting).toEqual(text(`done ${key} by ${racers[0].pid}`));
  expect(await held.done).toMatchObject({ ran: true, interrupted: false });
  expect(runs).toBe(0);
});

test('B1/B2: past the wait, a key another process still runs (a node Temporal gave up on) is answered busy; the retry gets that run’s answer', async () => {
  const key = 'job-lost-node/c1';
  const held = racers[3].once({ key, hold: true });
  await held.running;
  const store = open({ waitMs: 300, retryAfterSeconds: 7 });
  let runs = 0;
  const handler = keyedTool(store, 'race', () => text(`run ${++runs}`));
  const extra = { _meta: { 'oz0/idempotency_key': key } };

  const started = Date.now();
  await expect(store.once(key, {}, () => text('never'), { tool: 'race' })).rejects.toThrow(KeyBusyError);
  expect(Date.now() - started).toBeGreaterThanOrEqual(300);
  const answer = await handler({}, extra);
  expect(busyOf(answer)).toEqual({ retryAfter: 7 });
  expect(answer).toMatchObject({
    isError: true,
    content: [
      { type: 'text', text: expect.stringMatching(/^race: another attempt with idempotency key .* is still running/) },
    ],
  });
  expect(readKeyStore(file).some((r) => r.key === key)).toBe(false);

  racers[3].finish(held.id);
  await held.done;
  expect(await handler({}, extra)).toEqual(text(`done ${key} by ${racers[3].pid}`));
  expect(runs).toBe(0);
});

test('T4: an owner this process cannot look up (another container) is alive while its store refreshes the claim, and taken over once stale', async () => {
  const key = 'job-elsewhere/c1';
  // A claim as a process in another pid namespace leaves it: its pid means nothing here.
  const db = new Database(file);
  const claim = db.prepare(
    `INSERT INTO claims (key, tool, canonical, token, host, kernel, pid, start, claimed_at, seen_at, takeovers)
     VALUES (?, 'race', '{}', 'tok', 'node-b', 'other-boot/pid:[1]', 1, '1', ?, ?, 0)`,
  );
  claim.run(key, Date.now(), Date.now());
  const fresh = open({ waitMs: 300, staleMs: 60_000 });
  await expect(fresh.once(key, {}, () => text('never'), { tool: 'race' })).rejects.toThrow(/pid 1 on node-b/);

  // Nobody refreshes it: staleMs after its last refresh it is dead, and the run is told it was interrupted.
  const store = open({ waitMs: 5000, staleMs: 1000 });
  let told: boolean | undefined;
  const started = Date.now();
  db.prepare(`UPDATE claims SET seen_at = ? WHERE key = ?`).run(started, key);
  const answer = await store.once(key, {}, (run) => ((told = run.interrupted), text('took over')), { tool: 'race' });
  expect(answer).toEqual(text('took over'));
  expect(told).toBe(true);
  expect(Date.now() - started).toBeGreaterThanOrEqual(1000);

  // A live store refreshes what it holds: its claim's seen_at moves on while fn runs.
  const live = await startRacer(file, { RACER_STALE_MS: '500' });
  const held = live.once({ key: 'job-elsewhere/c2', hold: true });
  await held.running;
  const seen = () =>
    (db.prepare(`SELECT seen_at FROM claims WHERE key = ?`).get('job-elsewhere/c2') as { seen_at: number }).seen_at;
  const first = seen();
  await sleep(400);
  expect(seen()).toBeGreaterThan(first);
  live.finish(held.id);
  await held.done;
  live.child.kill('SIGKILL');
  await live.exited;
  db.close();
});

test('the writes (their fsyncs, and a lock another process holds) run off the event loop: it stays free while they commit', async () => {
  const store = open();
  await store.once('job-loop/warm', {}, () => text('warm'));

  // Another connection holds the write lock for 500 ms: the store's claim waits for it, on its own thread. On this
  // thread the loop would stop (and the holder, on this loop too, could not let go before the busy timeout).
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const other = new Database(file);
  other.exec('BEGIN IMMEDIATE');
  const started = performance.now();
  const blocked = store.once('job-loop/locked', {}, () => text('after the lock'));
  await sleep(500);
  other.exec('COMMIT');
  other.close();
  expect(await blocked).toEqual(text('after the lock'));
  const waited = performance.now() - started;
  delay.disable();
  expect(waited).toBeGreaterThanOrEqual(500);
  // Loose: a loaded 2-core machine delays timers by itself, but not by the 500 ms the lock took.
  expect(delay.max / 1e6).toBeLessThan(400);

  // Many writes at once, each a claim and a record fsync'd in turn, all recorded. (How busy the loop is while they
  // commit is the bench's to measure, not a test's: on a loaded 2-core machine it measured the machine.)
  await Promise.all(Array.from({ length: 200 }, (_, i) => store.once(`job-loop/k${i}`, {}, () => text(`${i}`))));
  expect(readKeyStore(file).filter((r) => r.key.startsWith('job-loop/k'))).toHaveLength(200);
});
