/**
 * Key → answer, durable and shared: a server killed with kill -9 (a lost node) and started again answers a key it
 * has seen with the answer it gave then, and every process on one machine that opens the same file — several
 * nodes' plugin servers, the sandboxed servers of many jobs, an attempt still running on a node Temporal gave up on
 * while the next attempt runs elsewhere — runs `fn` at most once per key between them.
 *
 * How: the file is an SQLite database (store-file.ts). Before `fn` runs, its caller commits a claim on the key
 * (store-writer.ts), in the same transaction that found the key without an answer; `fn`'s answer and the claim's
 * removal commit together. Another process that finds a live owner's claim waits for the answer, and past a bound
 * answers busy so that oz0 tries again later; a claim whose owner died (store-owner.ts) is taken over, and `fn` is
 * told the run before it was interrupted. The writes run on a thread of their own (store-thread.ts), so their fsyncs
 * never stall the server's other calls; reads stay on the caller's thread.
 */
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { isBusy } from './busy';
import { StoreReads, canonicalArgs, hasTables, holderOf, openDatabase, recordOf } from './store-file';
import type { KeyRecord, RecordRow } from './store-file';
import { fileKind, fsyncDir, migrateJsonLines, readJsonLines } from './store-migrate';
import { describeOwner, ownerAlive, thisProcess } from './store-owner';
import { WriterThread } from './store-thread';
import type { ClaimCall, ClaimResult } from './store-writer';

export { KeyStoreError } from './store-file';
export type { KeyRecord } from './store-file';

/** Options for {@link openKeyStore}. */
export interface KeyStoreOptions<T> {
  /**
   * Which answers are kept. By default every answer but a busy one (B1): a busy answer means nothing was done, so
   * the retry oz0 makes under the same key must act.
   */
  keep?: (answer: T) => boolean;
  /**
   * How long `once` waits for another process that is running the same key before it throws {@link KeyBusyError}
   * (default 5000 ms). Keep it well under the tool's time limit: the busy answer is what lets oz0 try again.
   */
  waitMs?: number;
  /** The wait a {@link KeyBusyError} asks for, in seconds (default 5; oz0 retries only waits of 60 s or less). */
  retryAfterSeconds?: number;
  /**
   * An owner this process cannot look up (on another machine or in another container) is taken for dead when its
   * store has not refreshed its claim for this long (default 10000 ms; a live store refreshes every fifth of it).
   */
  staleMs?: number;
}

/** Options for one {@link KeyStore.once} call. */
export interface OnceOptions {
  /**
   * The function the key is used with. A key is one call of one function, so the same key with another function is
   * refused like the same key with other arguments.
   */
  tool?: string;
}

/** What `fn` is told about its run. */
export interface OnceRun {
  /**
   * An earlier run of this key was interrupted: its process died after it claimed the key and before its answer
   * was recorded, so it may or may not have had its effect. Check with the service by the key (pass the key on, and
   * look it up) before acting again.
   */
  interrupted: boolean;
}

/** A key used again with other arguments (or another function): refused, never answered with another call's answer. */
export class KeyReuseError extends Error {
  override name = 'KeyReuseError';
  constructor(
    readonly key: string,
    readonly first: { tool?: string; args: string },
    readonly now: { tool?: string; args: string },
  ) {
    const call = (c: { tool?: string; args: string }) => (c.tool ? `${c.tool} ${c.args}` : c.args);
    super(
      `idempotency key ${JSON.stringify(key)} was already used with other arguments (${call(first)}); ` +
        `refusing ${call(now)}`,
    );
  }
}

/** Another process is running the same key and did not answer within the wait: try again after `retryAfter` s. */
export class KeyBusyError extends Error {
  override name = 'KeyBusyError';
  constructor(
    readonly key: string,
    readonly retryAfter: number,
    readonly owner: string,
  ) {
    super(
      `another attempt with idempotency key ${JSON.stringify(key)} is still running (${owner}); ` +
        `try again in ${retryAfter} s`,
    );
  }
}

interface Call {
  tool?: string;
  args: string;
}

interface Pending<T> extends Call {
  promise: Promise<T>;
}

/**
 * Reads a store's file without changing it: every record, in the order written. For a second reader, such as a tool
 * that counts what was done. A JSON-lines file of an earlier kit, not yet opened by this one, is read as it is.
 */
export function readKeyStore<T = CallToolResult>(file: string): Array<KeyRecord<T>> {
  const kind = fileKind(file);
  if (kind === 'missing' || kind === 'empty') return [];
  if (kind === 'json-lines') return readJsonLines<T>(file);
  const db = openDatabase(file, { readonly: true });
  try {
    return hasTables(db, file) ? new StoreReads(db).all().map((row) => recordOf<T>(row)) : [];
  } finally {
    db.close();
  }
}

/**
 * Opens (or creates) the store in `file`, and its folders. A JSON-lines store of an earlier kit is migrated: its
 * records imported, the old file kept beside as `<file>.before-sqlite`. Throws {@link KeyStoreError} for a file that
 * is not a store (or an old one with a bad line).
 */
export function openKeyStore<T = CallToolResult>(file: string, opts: KeyStoreOptions<T> = {}): KeyStore<T> {
  return new KeyStore<T>(path.resolve(file), opts);
}

/** Key → first answer, durable, shared by the processes that open one file. Make one with {@link openKeyStore}. */
export class KeyStore<T = CallToolResult> {
  private readonly reads: StoreReads;
  private readonly writer: WriterThread;
  /** Keys whose `fn` runs in this process: a second caller waits for the first, without asking the file. */
  private readonly pending = new Map<string, Pending<T>>();
  private readonly keep: (answer: T) => boolean;
  private readonly waitMs: number;
  private readonly retryAfter: number;
  private readonly staleMs: number;

  constructor(
    readonly file: string,
    opts: KeyStoreOptions<T> = {},
  ) {
    this.keep = opts.keep ?? ((answer) => !isBusy(answer));
    this.waitMs = opts.waitMs ?? 5000;
    this.retryAfter = opts.retryAfterSeconds ?? 5;
    this.staleMs = opts.staleMs ?? 10_000;
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const kind = fileKind(file);
    if (kind === 'json-lines') migrateJsonLines(file);
    this.reads = new StoreReads(openDatabase(file));
    if (kind === 'missing') fsyncDir(path.dirname(file));
    const heartbeatMs = Math.max(50, Math.floor(this.staleMs / 5));
    this.writer = new WriterThread({
      oz0KeyStoreWriter: true,
      file,
      owner: thisProcess(),
      staleMs: this.staleMs,
      heartbeatMs,
    });
  }

  /** How many keys the store holds (every process's). */
  get size(): number {
    return this.reads.count();
  }

  /** The record of a key, if the store has one. */
  get(key: string): KeyRecord<T> | undefined {
    const row = this.reads.record(key);
    return row && recordOf<T>(row);
  }

  /** Every record, in the order they were written. */
  records(): Array<KeyRecord<T>> {
    return this.reads.all().map((row) => recordOf<T>(row));
  }

  /**
   * Runs `fn` at most once per key — across this process and every other that opened the same file — and answers
   * every later use of the key with the first answer.
   *
   * - A key the store has, with the same arguments (RFC 8785: key order never matters) and function, gets the stored
   *   answer; `fn` is not called. This holds after a restart: the answer was on disk before `once` returned it.
   * - A key the store has (or another process is running) with other arguments or another function throws
   *   {@link KeyReuseError}.
   * - A key whose `fn` is running — in this process, or in another live one — waits for its answer, then gets it;
   *   `fn` runs once. Past `waitMs` it throws {@link KeyBusyError}: the run goes on, and a later retry gets its
   *   answer.
   * - A key whose earlier run's process died before recording (kill -9, a lost node) runs `fn` with
   *   `{ interrupted: true }`: that run may have had its effect, so check with the service by the key.
   * - When `fn` throws, nothing is kept and the error is thrown: the key stays unused, and the next caller (one that
   *   waited, or a later retry) runs `fn` again. So throw only when nothing was done — a cancelled handler that
   *   stopped before its write, for example — and return an error result for a refusal that must stand.
   * - An answer that `keep` refuses (by default a {@link busy} one) is returned, and to the callers in this process
   *   that waited for it, but not kept: the retry under the same key runs `fn` again.
   *
   * The answer returned is the one stored, as it reads back (JSON), so the first answer and every replay are equal.
   */
  async once(key: string, args: unknown, fn: (run: OnceRun) => T | Promise<T>, opts: OnceOptions = {}): Promise<T> {
    const call: Call = { tool: opts.tool, args: canonicalArgs(args) };
    const deadline = Date.now() + this.waitMs;
    for (;;) {
      const row = this.reads.record(key);
      if (row) return this.replay(key, row, call);
      const running = this.pending.get(key);
      if (!running) break;
      if (running.tool !== call.tool || running.args !== call.args) throw new KeyReuseError(key, running, call);
      const outcome = await this.waitFor(running.promise, deadline);
      if (!outcome) throw new KeyBusyError(key, this.retryAfter, describeOwner(thisProcess()));
      if ('answer' in outcome) return structuredClone(outcome.answer);
      // The run waited for another process already: waiting again would double the wait.
      if (outcome.err instanceof KeyBusyError) throw outcome.err;
      // The run threw and kept nothing: look again, and run fn if nobody else took it up.
    }

    let settle!: { resolve: (answer: T) => void; reject: (err: unknown) => void };
    const promise = new Promise<T>((resolve, reject) => (settle = { resolve, reject }));
    // Nobody may be waiting; a rejection with no waiter is not an unhandled one.
    promise.catch(() => undefined);
    this.pending.set(key, { ...call, promise });
    this.writer.hold();
    try {
      const answer = await this.claimOrWait(key, args, call, fn, deadline);
      this.pending.delete(key);
      settle.resolve(answer);
      return structuredClone(answer);
    } catch (err) {
      this.pending.delete(key);
      settle.reject(err);
      throw err;
    } finally {
      this.writer.letGo();
    }
  }

  /** Closes the file and ends the writer thread. Call it once no `once` is in flight. */
  async close(): Promise<void> {
    await this.writer.close();
    if (this.reads.db.open) this.reads.db.close();
  }

  /** This process's run of a key, its outcome, or nothing when it is still running at the deadline. */
  private async waitFor(run: Promise<T>, deadline: number): Promise<{ answer: T } | { err: unknown } | undefined> {
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<undefined>((resolve) => {
      timer = setTimeout(() => resolve(undefined), Math.max(0, deadline - Date.now()));
    });
    try {
      return await Promise.race([
        run.then(
          (answer) => ({ answer }),
          (err: unknown) => ({ err }),
        ),
        late,
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  /** Claims the key, or waits for the process that has it; then runs `fn`, or replays the answer it left. */
  private async claimOrWait(
    key: string,
    args: unknown,
    call: Call,
    fn: (run: OnceRun) => T | Promise<T>,
    deadline: number,
  ): Promise<T> {
    const claim: ClaimCall = { key, tool: call.tool ?? null, canonical: call.args, token: randomUUID() };
    let pause = 5;
    for (;;) {
      const got = await this.writer.request<ClaimResult>({ op: 'claim', call: claim });
      if (got.kind === 'answer') return this.replay(key, got.row, call);
      if (got.kind === 'claimed') return this.run(claim, args, fn, got.takeovers > 0);
      const held = got.row;
      if (held.tool !== claim.tool || held.canonical !== claim.canonical) {
        throw new KeyReuseError(key, { tool: held.tool ?? undefined, args: held.canonical }, call);
      }
      // A live owner runs the key: poll the file (a read, on this thread) until it answers, lets go, or dies.
      for (;;) {
        if (Date.now() >= deadline) throw new KeyBusyError(key, this.retryAfter, describeOwner(holderOf(held)));
        await new Promise((resolve) => setTimeout(resolve, Math.min(pause, deadline - Date.now())));
        pause = Math.min(pause * 2, 200);
        const row = this.reads.record(key);
        if (row) return this.replay(key, row, call);
        const now = this.reads.claim(key);
        if (!now || now.token !== held.token || !ownerAlive(holderOf(now), Date.now(), this.staleMs)) break;
      }
    }
  }

  private async run(claim: ClaimCall, args: unknown, fn: (run: OnceRun) => T | Promise<T>, interrupted: boolean) {
    const release = () => this.writer.request({ op: 'release', key: claim.key, token: claim.token });
    let answer: T;
    try {
      answer = await fn({ interrupted });
    } catch (err) {
      await release().catch(() => undefined);
      throw err;
    }
    if (!this.keep(answer)) {
      await release();
      return answer;
    }
    let row: RecordRow;
    try {
      const argsJson = args === undefined ? null : JSON.stringify(args);
      row = await this.writer.request<RecordRow>({
        op: 'record',
        call: claim,
        args: argsJson,
        answer: JSON.stringify(answer),
      });
    } catch (err) {
      // fn did its work and nothing says so: the next caller takes the claim over, told it was interrupted.
      await this.writer.request({ op: 'abandon', key: claim.key, token: claim.token }).catch(() => undefined);
      throw err;
    }
    return recordOf<T>(row).answer;
  }

  private replay(key: string, row: RecordRow, call: Call): T {
    if ((row.tool ?? undefined) !== call.tool || row.canonical !== call.args) {
      throw new KeyReuseError(key, { tool: row.tool ?? undefined, args: row.canonical }, call);
    }
    return recordOf<T>(row).answer;
  }
}
