/**
 * The key store's file: an SQLite database in WAL mode with `synchronous=FULL`, so a committed transaction is on
 * disk (the WAL fsync'd) before the store answers, and one file can be shared by every process of one machine:
 * SQLite's locks make "look up the key, claim it" one step for all of them. (WAL needs every process on one host:
 * not a network file system.)
 *
 * Two tables: `records` (key → the answer given, the first one for good) and `claims` (key → the process running
 * `fn` for it now). This module opens the file and reads it; the writes are the writer thread's (store-writer.ts).
 */
import Database from 'better-sqlite3';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { canonicalize } from 'json-canonicalize';
import type { ClaimHolder } from './store-owner';

/** One record: a key, the call it was used for, and the answer given. */
export interface KeyRecord<T = CallToolResult> {
  key: string;
  /** The function the key was used with, when the store was told (see {@link OnceOptions.tool}). */
  tool?: string;
  args: unknown;
  answer: T;
}

/** The file cannot be used as a key store: not one of ours, a newer format, or an old file with a bad line. */
export class KeyStoreError extends Error {
  override name = 'KeyStoreError';
}

/** How long a connection waits for another process's write lock before it fails (SQLite's busy timeout). */
export const BUSY_TIMEOUT_MS = 10_000;

/** `PRAGMA application_id`: marks the file as an oz0 key store ("oz0k"), so a stranger's database is refused. */
const APPLICATION_ID = 0x6f7a306b;
const SCHEMA_VERSION = 1;

const SCHEMA = `
  CREATE TABLE records (
    id INTEGER PRIMARY KEY,          -- the order records were written in
    key TEXT NOT NULL UNIQUE,
    tool TEXT,
    args TEXT,                       -- the arguments as given, JSON; NULL when there were none
    canonical TEXT NOT NULL,         -- the arguments in RFC 8785 form, compared with a later call's
    answer TEXT NOT NULL,            -- JSON
    written_at INTEGER NOT NULL      -- ms since 1970 (when migrated, for a record of a JSON-lines store)
  );
  CREATE TABLE claims (
    key TEXT PRIMARY KEY,
    tool TEXT,
    canonical TEXT NOT NULL,
    token TEXT NOT NULL,             -- this claim, so only its holder records or releases it
    host TEXT NOT NULL,              -- the owner (store-owner.ts)
    kernel TEXT NOT NULL,
    pid INTEGER NOT NULL,
    start TEXT NOT NULL,
    claimed_at INTEGER NOT NULL,     -- ms since 1970
    seen_at INTEGER NOT NULL,        -- when the owner's store last said it is alive
    takeovers INTEGER NOT NULL       -- how many owners before this one died holding it
  ) WITHOUT ROWID;
`;

/** A row of `records`. */
export interface RecordRow {
  key: string;
  tool: string | null;
  args: string | null;
  canonical: string;
  answer: string;
}

/** A row of `claims`. */
export interface ClaimRow {
  key: string;
  tool: string | null;
  canonical: string;
  token: string;
  host: string;
  kernel: string;
  pid: number;
  start: string;
  claimed_at: number;
  seen_at: number;
  takeovers: number;
}

/** RFC 8785 canonical JSON, so two argument objects are equal whatever their key order. No arguments are `{}`. */
export function canonicalArgs(args: unknown): string {
  return canonicalize(args === undefined ? {} : args);
}

export function recordOf<T>(row: RecordRow): KeyRecord<T> {
  return {
    key: row.key,
    ...(row.tool !== null && { tool: row.tool }),
    args: row.args === null ? undefined : JSON.parse(row.args),
    answer: JSON.parse(row.answer) as T,
  };
}

export function holderOf(row: ClaimRow): ClaimHolder {
  return { host: row.host, kernel: row.kernel, pid: row.pid, start: row.start, seenAt: row.seen_at };
}

/**
 * Opens a connection to the store in `file`, creating the file and its tables when there are none. `readonly` opens
 * an existing file for reading only and creates nothing: see {@link hasTables} before reading from it.
 */
export function openDatabase(file: string, opts: { readonly?: boolean } = {}): Database.Database {
  const readonly = opts.readonly ?? false;
  const db = new Database(file, { readonly, fileMustExist: readonly });
  try {
    db.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    if (readonly) return db;
    // WAL lets readers read while a writer commits; FULL fsyncs the WAL at every commit (NORMAL would not, and a
    // power cut could then lose an answer already given).
    const mode = db.pragma('journal_mode = WAL', { simple: true });
    // SQLite keeps the old mode when it cannot switch; without WAL, readers would wait for writers.
    if (mode !== 'wal') throw new KeyStoreError(`${file}: SQLite could not use WAL here (journal mode ${mode})`);
    db.pragma('synchronous = FULL');
    if (!hasTables(db, file)) {
      // IMMEDIATE: two processes opening a new file at once must not both create the tables.
      db.transaction(() => {
        if (hasTables(db, file)) return;
        db.exec(SCHEMA);
        db.pragma(`application_id = ${APPLICATION_ID}`);
        db.pragma(`user_version = ${SCHEMA_VERSION}`);
      }).immediate();
    }
    return db;
  } catch (err) {
    db.close();
    throw err;
  }
}

/**
 * Whether the database holds a key store's tables: false for an empty one (a store not yet written), and
 * {@link KeyStoreError} for another program's database or a format this kit does not know.
 */
export function hasTables(db: Database.Database, file: string): boolean {
  const app = db.pragma('application_id', { simple: true }) as number;
  const version = db.pragma('user_version', { simple: true }) as number;
  if (app === APPLICATION_ID && version === SCHEMA_VERSION) return true;
  const tables = (db.prepare(`SELECT count(*) AS n FROM sqlite_schema`).get() as { n: number }).n;
  if (app === 0 && version === 0 && tables === 0) return false;
  if (app !== APPLICATION_ID) throw new KeyStoreError(`${file}: an SQLite database, but not an oz0 key store`);
  throw new KeyStoreError(`${file}: a key store of format ${version}; this kit reads format ${SCHEMA_VERSION}`);
}

/** The reads every connection makes, prepared once. */
export class StoreReads {
  private readonly recordStmt: Database.Statement<[string], RecordRow>;
  private readonly claimStmt: Database.Statement<[string], ClaimRow>;
  private readonly allStmt: Database.Statement<[], RecordRow>;
  private readonly countStmt: Database.Statement<[], { n: number }>;

  constructor(readonly db: Database.Database) {
    this.recordStmt = db.prepare(`SELECT key, tool, args, canonical, answer FROM records WHERE key = ?`);
    this.claimStmt = db.prepare(`SELECT * FROM claims WHERE key = ?`);
    this.allStmt = db.prepare(`SELECT key, tool, args, canonical, answer FROM records ORDER BY id`);
    this.countStmt = db.prepare(`SELECT count(*) AS n FROM records`);
  }

  record(key: string): RecordRow | undefined {
    return this.recordStmt.get(key);
  }

  claim(key: string): ClaimRow | undefined {
    return this.claimStmt.get(key);
  }

  all(): RecordRow[] {
    return this.allStmt.all();
  }

  count(): number {
    return this.countStmt.get()!.n;
  }
}
