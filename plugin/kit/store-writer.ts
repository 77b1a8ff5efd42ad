/**
 * The key store's writes, in a worker thread of their own: each is an SQLite transaction whose commit waits for an
 * fsync (and, when another process holds the write lock, for that lock), so on the server's main thread it would
 * stall every other call the server is answering. Here only this thread waits; the main thread gets a message.
 *
 * Every write is `BEGIN IMMEDIATE`: the write lock is taken before the key is looked up, so "no answer and no live
 * claim, so claim it" is one step for every process on the file (a deferred transaction could read, then fail to
 * upgrade, past the busy timeout).
 */
import { parentPort, workerData } from 'node:worker_threads';
import type { MessagePort } from 'node:worker_threads';
import type Database from 'better-sqlite3';
import { StoreReads, holderOf, openDatabase } from './store-file';
import type { ClaimRow, RecordRow } from './store-file';
import { NO_OWNER, ownerAlive } from './store-owner';
import type { Owner } from './store-owner';

/** What the thread is started with. */
export interface WriterData {
  oz0KeyStoreWriter: true;
  file: string;
  owner: Owner;
  /** An owner this process cannot look up is dead when its claim was not refreshed for this long. */
  staleMs: number;
  /** How often this thread refreshes the claims it holds. */
  heartbeatMs: number;
}

/** The call a claim is for: a claim with other arguments or another function means a key used twice. */
export interface ClaimCall {
  key: string;
  tool: string | null;
  canonical: string;
  token: string;
}

export type ClaimResult =
  /** The key has an answer. */
  | { kind: 'answer'; row: RecordRow }
  /** The key is this caller's to run; `takeovers` > 0 when an earlier owner died holding it. */
  | { kind: 'claimed'; takeovers: number }
  /** A live owner holds the key (or one with other arguments: the caller refuses). */
  | { kind: 'held'; row: ClaimRow };

export type WriteRequest =
  | { op: 'claim'; call: ClaimCall }
  | { op: 'record'; call: ClaimCall; args: string | null; answer: string }
  | { op: 'release'; key: string; token: string }
  | { op: 'abandon'; key: string; token: string }
  | { op: 'close' };

/** The transactions, on a connection of their own. */
export class StoreWriter {
  private readonly reads: StoreReads;
  private readonly db: Database.Database;
  /** Claims this thread holds, by token: refreshed until recorded or released. */
  private readonly held = new Set<string>();
  private readonly sql: Record<'claim' | 'insert' | 'release' | 'abandon' | 'refresh', Database.Statement>;

  constructor(
    file: string,
    private readonly owner: Owner,
    private readonly staleMs: number,
  ) {
    this.reads = new StoreReads(openDatabase(file));
    this.db = this.reads.db;
    this.sql = {
      claim: this.db.prepare(
        `INSERT OR REPLACE INTO claims (key, tool, canonical, token, host, kernel, pid, start, claimed_at, seen_at,
           takeovers) VALUES (@key, @tool, @canonical, @token, @host, @kernel, @pid, @start, @now, @now, @takeovers)`,
      ),
      insert: this.db.prepare(
        `INSERT INTO records (key, tool, args, canonical, answer, written_at) VALUES (?, ?, ?, ?, ?, ?)`,
      ),
      release: this.db.prepare(`DELETE FROM claims WHERE key = ? AND token = ?`),
      abandon: this.db.prepare(
        `UPDATE claims SET host = ?, kernel = ?, pid = ?, start = ?, seen_at = 0 WHERE key = ? AND token = ?`,
      ),
      refresh: this.db.prepare(`UPDATE claims SET seen_at = ? WHERE token = ?`),
    };
  }

  claim(call: ClaimCall): ClaimResult {
    return this.db
      .transaction((): ClaimResult => {
        const row = this.reads.record(call.key);
        if (row) return { kind: 'answer', row };
        const now = Date.now();
        const claim = this.reads.claim(call.key);
        const sameCall = claim && claim.tool === call.tool && claim.canonical === call.canonical;
        if (claim && (!sameCall || ownerAlive(holderOf(claim), now, this.staleMs, this.owner))) {
          return { kind: 'held', row: claim };
        }
        const takeovers = claim ? claim.takeovers + 1 : 0;
        this.sql.claim.run({ ...call, ...this.owner, now, takeovers });
        this.held.add(call.token);
        return { kind: 'claimed', takeovers };
      })
      .immediate();
  }

  /**
   * Keeps the answer and drops the claim, in one commit. When the key has a record already (an owner thought dead
   * recorded first), that first record stands and is returned: every caller of a key gets one answer.
   */
  record(call: ClaimCall, args: string | null, answer: string): RecordRow {
    this.held.delete(call.token);
    return this.db
      .transaction((): RecordRow => {
        let row = this.reads.record(call.key);
        if (!row) {
          this.sql.insert.run(call.key, call.tool, args, call.canonical, answer, Date.now());
          row = { key: call.key, tool: call.tool, args, canonical: call.canonical, answer };
        }
        this.sql.release.run(call.key, call.token);
        return row;
      })
      .immediate();
  }

  /** Drops a claim whose run kept nothing (fn threw, or a busy answer): the key is free again. */
  release(key: string, token: string): void {
    this.held.delete(token);
    this.sql.release.run(key, token);
  }

  /**
   * Leaves a claim whose run may have had its effect but could not be recorded, as if its owner died: the next
   * caller takes it over and is told the run was interrupted, rather than waiting for this live process forever.
   */
  abandon(key: string, token: string): void {
    this.held.delete(token);
    const o = NO_OWNER;
    this.sql.abandon.run(o.host, o.kernel, o.pid, o.start, key, token);
  }

  /** Tells other processes that this one still runs the keys it claimed. */
  heartbeat(): void {
    if (this.held.size === 0) return;
    const now = Date.now();
    this.db.transaction(() => this.held.forEach((token) => this.sql.refresh.run(now, token))).immediate();
  }

  close(): void {
    this.db.close();
  }

  handle(request: WriteRequest): unknown {
    switch (request.op) {
      case 'claim':
        return this.claim(request.call);
      case 'record':
        return this.record(request.call, request.args, request.answer);
      case 'release':
        return this.release(request.key, request.token);
      case 'abandon':
        return this.abandon(request.key, request.token);
      case 'close':
        return this.close();
    }
  }
}

/** The thread's loop: one request at a time, in order, each answered with its id. */
function serve(port: MessagePort, data: WriterData): void {
  const writer = new StoreWriter(data.file, data.owner, data.staleMs);
  const beat = setInterval(() => {
    try {
      writer.heartbeat();
    } catch {
      // A missed beat is retried at the next; a claim goes stale only after several.
    }
  }, data.heartbeatMs);
  port.on('message', ({ id, request }: { id: number; request: WriteRequest }) => {
    try {
      port.postMessage({ id, ok: true, result: writer.handle(request) });
    } catch (err) {
      const e = err as Error;
      port.postMessage({
        id,
        ok: false,
        error: { name: e.name, message: e.message, code: (e as { code?: string }).code },
      });
    }
    if (request.op === 'close') {
      clearInterval(beat);
      port.close();
    }
  });
}

if (parentPort && (workerData as WriterData | undefined)?.oz0KeyStoreWriter)
  serve(parentPort, workerData as WriterData);
