/**
 * Key → answer, kept in an fsync'd append-only JSON-lines file, so a server that is killed (kill -9, a lost node)
 * and started again still answers a key it has seen with the answer it gave then.
 *
 * One process owns a file: the store keeps every record in memory after reading the file once, and only appends.
 * That fits oz0's plugin servers (one process per plugin per node); two processes on one file would each miss the
 * other's keys.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { CallToolResult } from '@modelcontextprotocol/sdk/types.js';
import { canonicalize } from 'json-canonicalize';
import { z } from 'zod';
import { isBusy } from './busy';

/** One line of the file: a key, the call it was used for, and the answer given. */
export interface KeyRecord<T = CallToolResult> {
  key: string;
  /** The function the key was used with, when the store was told (see {@link OnceOptions.tool}). */
  tool?: string;
  args: unknown;
  answer: T;
}

const RecordSchema = z.object({
  key: z.string().min(1),
  tool: z.string().optional(),
  args: z.unknown(),
  answer: z.unknown(),
});

/** Options for {@link openKeyStore}. */
export interface KeyStoreOptions<T> {
  /**
   * Which answers are kept. By default every answer but a busy one (B1): a busy answer means nothing was done, so
   * the retry oz0 makes under the same key must act.
   */
  keep?: (answer: T) => boolean;
}

/** Options for one {@link KeyStore.once} call. */
export interface OnceOptions {
  /**
   * The function the key is used with. A key is one call of one function, so the same key with another function is
   * refused like the same key with other arguments.
   */
  tool?: string;
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

/** The file cannot be read as a store: a line in the middle that is not a record. */
export class KeyStoreError extends Error {
  override name = 'KeyStoreError';
}

/** What the store holds per key: the record as it reads back from the file, and its arguments in canonical form. */
interface Entry<T> {
  record: KeyRecord<T>;
  tool?: string;
  args: string;
}

interface Pending<T> {
  tool?: string;
  args: string;
  promise: Promise<T>;
}

/** RFC 8785 canonical JSON, so two argument objects are equal whatever their key order. No arguments are `{}`. */
function canonicalArgs(args: unknown): string {
  return canonicalize(args === undefined ? {} : args);
}

/**
 * Reads a store's file without changing it: every complete record, in order. A torn last line (the writer was
 * killed mid-append, before its fsync returned and so before it answered) is left out. For a second reader, such as
 * a tool that counts what was done.
 */
export function readKeyStore<T = CallToolResult>(file: string): Array<KeyRecord<T>> {
  return parseRecords<T>(file, readTail(file).complete);
}

function readTail(file: string): { complete: string; torn: boolean; size: number } {
  let buf: Buffer;
  try {
    buf = fs.readFileSync(file);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { complete: '', torn: false, size: 0 };
    throw err;
  }
  const end = buf.lastIndexOf(0x0a) + 1;
  return { complete: buf.subarray(0, end).toString('utf8'), torn: end < buf.length, size: end };
}

function parseRecords<T>(file: string, text: string): Array<KeyRecord<T>> {
  const records: Array<KeyRecord<T>> = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      parsed = undefined;
    }
    const record = RecordSchema.safeParse(parsed);
    // A bad complete line is not a torn write: guessing past it could forget a key and do its write twice.
    if (!record.success) throw new KeyStoreError(`${file}:${i + 1}: not a key store record`);
    records.push(record.data as KeyRecord<T>);
  });
  return records;
}

/** fsyncs a folder, so a file just created there is still there after a power cut. Not every platform can. */
function fsyncDir(dir: string): void {
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

/**
 * Opens (or creates) the store in `file`, reading every record. A torn last line is cut off the file, so the next
 * append starts on a line of its own.
 */
export function openKeyStore<T = CallToolResult>(file: string, opts: KeyStoreOptions<T> = {}): KeyStore<T> {
  return new KeyStore<T>(path.resolve(file), opts);
}

/** Key → first answer, durable. Make one with {@link openKeyStore}. */
export class KeyStore<T = CallToolResult> {
  private readonly byKey = new Map<string, Entry<T>>();
  private readonly pending = new Map<string, Pending<T>>();
  private readonly keep: (answer: T) => boolean;
  /** Bytes of the file read so far: another process's appends after this are read before a key is judged unseen. */
  private bytes: number;

  constructor(
    readonly file: string,
    opts: KeyStoreOptions<T> = {},
  ) {
    this.keep = opts.keep ?? ((answer) => !isBusy(answer));
    fs.mkdirSync(path.dirname(file), { recursive: true });
    const tail = readTail(file);
    if (tail.torn) fs.truncateSync(file, tail.size);
    if (!fs.existsSync(file)) {
      fs.closeSync(fs.openSync(file, 'a'));
      fsyncDir(path.dirname(file));
    }
    this.bytes = tail.size;
    for (const record of parseRecords<T>(file, tail.complete)) {
      // The first answer given for a key is its answer; a later line for it cannot be one this store wrote.
      if (!this.byKey.has(record.key)) this.byKey.set(record.key, this.entry(record));
    }
  }

  /** How many keys the store holds. */
  get size(): number {
    return this.byKey.size;
  }

  /** The record of a key, if the store has one. */
  get(key: string): KeyRecord<T> | undefined {
    const entry = this.byKey.get(key);
    return entry && structuredClone(entry.record);
  }

  /** Every record, in the order they were written. */
  records(): Array<KeyRecord<T>> {
    return [...this.byKey.values()].map((e) => structuredClone(e.record));
  }

  /**
   * Runs `fn` once per key and answers every later use of the key with the first answer.
   *
   * - A key the store has, with the same arguments (RFC 8785: key order never matters) and function, gets the stored
   *   answer; `fn` is not called. This holds after a restart: the answer was on disk before `once` returned it.
   * - A key the store has with other arguments or another function throws {@link KeyReuseError}.
   * - A key whose `fn` is running in this process waits for it, then gets its answer (or the same
   *   {@link KeyReuseError}); `fn` runs once.
   * - When `fn` throws, nothing is kept and the error is thrown: the key stays unused, and the next caller (one that
   *   waited, or a later retry) runs `fn` again. So throw only when nothing was done — a cancelled handler that
   *   stopped before its write, for example — and return an error result for a refusal that must stand.
   * - An answer that `keep` refuses (by default a {@link busy} one) is returned, and to the callers that waited for
   *   it, but not kept: the retry under the same key runs `fn` again.
   *
   * The write and its record are two steps: a process killed between them did the write and kept no record. Pass the
   * key on to the service you call (most payment APIs take an idempotency key) to close that gap.
   */
  async once(key: string, args: unknown, fn: () => T | Promise<T>, opts: OnceOptions = {}): Promise<T> {
    const call = { tool: opts.tool, args: canonicalArgs(args) };
    for (;;) {
      // Another process on the same file (another node's server) may have answered this key since.
      if (!this.byKey.has(key) && !this.pending.has(key)) this.refresh();
      const seen = this.byKey.get(key);
      if (seen) return this.replay(key, seen, call);
      const running = this.pending.get(key);
      if (!running) break;
      if (running.tool !== call.tool || running.args !== call.args) throw new KeyReuseError(key, running, call);
      const outcome = await running.promise.then(
        (answer) => ({ answer }),
        () => undefined,
      );
      if (outcome) return structuredClone(outcome.answer);
      // The run threw and kept nothing: look again, and run fn if nobody else took it up.
    }

    let settle!: { resolve: (answer: T) => void; reject: (err: unknown) => void };
    const promise = new Promise<T>((resolve, reject) => (settle = { resolve, reject }));
    // Nobody may be waiting; a rejection with no waiter is not an unhandled one.
    promise.catch(() => undefined);
    this.pending.set(key, { ...call, promise });
    try {
      let answer: T = await fn();
      if (this.keep(answer)) {
        const record = { key, ...(call.tool !== undefined ? { tool: call.tool } : {}), args, answer };
        answer = this.append(record, call);
      }
      this.pending.delete(key);
      settle.resolve(answer);
      return structuredClone(answer);
    } catch (err) {
      this.pending.delete(key);
      settle.reject(err);
      throw err;
    }
  }

  /** Reads the records other processes appended since this store last looked. */
  private refresh(): void {
    let fd: number;
    try {
      fd = fs.openSync(this.file, 'r');
    } catch {
      return;
    }
    try {
      const size = fs.fstatSync(fd).size;
      if (size <= this.bytes) return;
      const buf = Buffer.alloc(size - this.bytes);
      fs.readSync(fd, buf, 0, buf.length, this.bytes);
      const end = buf.lastIndexOf(0x0a) + 1;
      for (const record of parseRecords<T>(this.file, buf.subarray(0, end).toString('utf8'))) {
        if (!this.byKey.has(record.key)) this.byKey.set(record.key, this.entry(record));
      }
      this.bytes += end;
    } finally {
      fs.closeSync(fd);
    }
  }

  private entry(record: KeyRecord<T>): Entry<T> {
    return { record, tool: record.tool, args: canonicalArgs(record.args) };
  }

  private replay(key: string, seen: Entry<T>, call: { tool?: string; args: string }): T {
    if (seen.tool !== call.tool || seen.args !== call.args) throw new KeyReuseError(key, seen, call);
    return structuredClone(seen.record.answer);
  }

  /**
   * Appends one record and fsyncs it, before anyone is answered. Returns the answer as it reads back from the file,
   * so the first answer and every replay of it (before and after a restart) are the same JSON.
   */
  private append(record: KeyRecord<T>, call: { tool?: string; args: string }): T {
    const line = `${JSON.stringify(record)}\n`;
    const fd = fs.openSync(this.file, 'a');
    let before = 0;
    try {
      before = fs.fstatSync(fd).size;
      fs.writeSync(fd, line);
      fs.fsyncSync(fd);
    } catch (err) {
      // A short write (a full disk) would glue the next record onto half of this one.
      try {
        fs.ftruncateSync(fd, before);
      } catch {
        // The write's own error is the one to report.
      }
      throw err;
    } finally {
      fs.closeSync(fd);
    }
    // Our own line is read again by the next refresh and skipped: the key is known by then.
    const stored = JSON.parse(line) as KeyRecord<T>;
    this.byKey.set(record.key, { record: stored, ...call });
    return stored.answer;
  }
}
