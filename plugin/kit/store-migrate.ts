/**
 * Stores written by earlier kits are JSON-lines files (one `{ key, tool, args, answer }` per line). Opening one
 * imports its records into an SQLite store at the same path and keeps the old file beside it, as
 * `<file>.before-sqlite`: its keys are not lost, and a file that cannot be read is refused, never half read.
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { BUSY_TIMEOUT_MS, KeyStoreError, canonicalArgs, openDatabase } from './store-file';
import type { KeyRecord } from './store-file';

const SQLITE_HEADER = Buffer.from('SQLite format 3\0', 'latin1');

/** What a store's path holds now. An empty file is an SQLite database with nothing in it yet. */
export function fileKind(file: string): 'missing' | 'empty' | 'sqlite' | 'json-lines' {
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return 'missing';
    throw err;
  }
  try {
    const head = Buffer.alloc(SQLITE_HEADER.length);
    const n = fs.readSync(fd, head, 0, head.length, 0);
    if (n === 0) return 'empty';
    return n === head.length && head.equals(SQLITE_HEADER) ? 'sqlite' : 'json-lines';
  } finally {
    fs.closeSync(fd);
  }
}

const LineSchema = z.object({
  key: z.string().min(1),
  tool: z.string().optional(),
  args: z.unknown(),
  answer: z.unknown(),
});

/**
 * The records of a JSON-lines store, in order. A torn last line (its writer was killed mid-append, before its fsync
 * and so before it answered anyone) is left out; a bad complete line is refused with {@link KeyStoreError}, because
 * guessing past it could forget a key and do its write twice.
 */
export function readJsonLines<T = CallToolResult>(file: string): Array<KeyRecord<T>> {
  const buf = fs.readFileSync(file);
  const complete = buf.subarray(0, buf.lastIndexOf(0x0a) + 1).toString('utf8');
  const records: Array<KeyRecord<T>> = [];
  complete.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      parsed = undefined;
    }
    const record = LineSchema.safeParse(parsed);
    if (!record.success) throw new KeyStoreError(`${file}:${i + 1}: not a key store record`);
    records.push(record.data as KeyRecord<T>);
  });
  return records;
}

/**
 * Turns the JSON-lines store in `file` into an SQLite store at the same path, and returns where the old file was
 * kept. Several processes may open the old file at once: an OS lock (SQLite's, on the empty file
 * `<file>.migration-lock` beside) lets one of them migrate, and the others find an SQLite file when they get the
 * lock. A process killed midway leaves the old file in place, and the next one starts again.
 *
 * The lock file stays: removed, a process that opened it a moment before would lock a file no longer there (SQLite
 * fails on that), or lock it while another process locks a new one. Delete it when no process has the store open.
 */
export function migrateJsonLines(file: string): string | undefined {
  const lock = new Database(`${file}.migration-lock`, { timeout: BUSY_TIMEOUT_MS });
  try {
    // EXCLUSIVE takes the file lock at once; the kernel lets it go if this process dies.
    lock.exec('BEGIN EXCLUSIVE');
    if (fileKind(file) !== 'json-lines') return undefined;
    const records = readJsonLines(file);
    const temp = `${file}.migrating-${process.pid}`;
    removeDatabase(temp);
    const db = openDatabase(temp);
    try {
      // The first answer given for a key is its answer; a later line for it cannot be one the old store wrote.
      const insert = db.prepare(
        `INSERT OR IGNORE INTO records (key, tool, args, canonical, answer, written_at) VALUES (?, ?, ?, ?, ?, ?)`,
      );
      const now = Date.now();
      db.transaction(() => {
        for (const r of records) {
          const args = r.args === undefined ? null : JSON.stringify(r.args);
          insert.run(r.key, r.tool ?? null, args, canonicalArgs(r.args), JSON.stringify(r.answer ?? null), now);
        }
      }).immediate();
    } finally {
      // The last connection's close writes the WAL into the file (fsync'd) and removes it: one file to rename.
      db.close();
    }
    const kept = keepBeside(file);
    fs.renameSync(temp, file);
    fsyncDir(path.dirname(file));
    return kept;
  } finally {
    lock.close();
  }
}

/** Links the old file to `<file>.before-sqlite` (or `.before-sqlite.2`, …): the same bytes, under a name that says. */
function keepBeside(file: string): string {
  for (let n = 1; ; n++) {
    const kept = `${file}.before-sqlite${n === 1 ? '' : `.${n}`}`;
    try {
      fs.linkSync(file, kept);
      return kept;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
}

function removeDatabase(file: string): void {
  for (const suffix of ['', '-wal', '-shm', '-journal']) fs.rmSync(`${file}${suffix}`, { force: true });
}

/** fsyncs a folder, so a file just renamed there keeps its name after a power cut. Not every platform can. */
export function fsyncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, 'r');
    fs.fsyncSync(fd);
  } catch {
    // Windows cannot open a folder; its file system journals the name itself.
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}
