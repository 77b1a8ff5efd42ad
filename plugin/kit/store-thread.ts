/**
 * The main thread's side of the store's writer thread (store-writer.ts): requests as promises, the thread started on
 * the first write, and kept from holding the process open while no call is in flight (a server that is done exits
 * as it would without a store).
 */
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { KeyStoreError } from './store-file';
import type { WriteRequest, WriterData } from './store-writer';

interface Waiting {
  resolve: (value: unknown) => void;
  reject: (err: Error) => void;
}

/**
 * Loads the writer's TypeScript source in a worker thread, for a kit run from source (ts-jest, ts-node): a worker
 * has no TypeScript loader of its own. A published kit runs the compiled store-writer.js and never takes this path.
 */
const FROM_SOURCE = `
  const fs = require('node:fs');
  const { workerData } = require('node:worker_threads');
  const ts = require(workerData.typescript);
  require.extensions['.ts'] = (module, file) => {
    const options = { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true };
    module._compile(ts.transpileModule(fs.readFileSync(file, 'utf8'), { fileName: file, compilerOptions: options }).outputText, file);
  };
  require(workerData.entry);
`;

function startWorker(data: WriterData): Worker {
  const compiled = path.join(__dirname, 'store-writer.js');
  if (fs.existsSync(compiled)) return new Worker(compiled, { workerData: data });
  const entry = path.join(__dirname, 'store-writer.ts');
  return new Worker(FROM_SOURCE, {
    eval: true,
    workerData: { ...data, entry, typescript: require.resolve('typescript') },
  });
}

/** An error from the writer thread, as it was thrown there (an SQLite error keeps its `code`, such as SQLITE_BUSY). */
function revive(error: { name: string; message: string; code?: string }): Error {
  const err = error.name === 'KeyStoreError' ? new KeyStoreError(error.message) : new Error(error.message);
  err.name = error.name;
  if (error.code !== undefined) Object.assign(err, { code: error.code });
  return err;
}

export class WriterThread {
  private worker?: Worker;
  private nextId = 0;
  private readonly waiting = new Map<number, Waiting>();
  /** Calls in flight that need the thread (their claim is held, or a write is on its way). */
  private users = 0;
  private closing = false;

  constructor(private readonly data: WriterData) {}

  request<R>(request: WriteRequest): Promise<R> {
    const worker = this.start();
    const id = ++this.nextId;
    return new Promise<R>((resolve, reject) => {
      this.waiting.set(id, { resolve: resolve as (value: unknown) => void, reject });
      this.holdProcess();
      worker.postMessage({ id, request });
    });
  }

  /** A call started: the thread holds the process open until it ends (it refreshes the call's claim meanwhile). */
  hold(): void {
    this.users++;
    this.holdProcess();
  }

  letGo(): void {
    this.users--;
    this.holdProcess();
  }

  /** The thread keeps the process alive while a call is in flight or a request awaits its answer, and only then. */
  private holdProcess(): void {
    if (this.users > 0 || this.waiting.size > 0 || this.closing) this.worker?.ref();
    else this.worker?.unref();
  }

  /** Closes the thread's connection and ends it. */
  async close(): Promise<void> {
    const worker = this.worker;
    if (!worker) return;
    const exited = new Promise((resolve) => worker.once('exit', resolve));
    // Until the thread has ended, so that what follows `await close()` runs.
    this.closing = true;
    try {
      await this.request({ op: 'close' });
      await exited;
    } finally {
      this.closing = false;
    }
  }

  private start(): Worker {
    if (this.worker) return this.worker;
    const worker = startWorker(this.data);
    worker.on('message', ({ id, ok, result, error }) => {
      const waiting = this.waiting.get(id);
      this.waiting.delete(id);
      this.holdProcess();
      if (ok) waiting?.resolve(result);
      else waiting?.reject(revive(error));
    });
    const fail = (err: Error) => {
      for (const waiting of this.waiting.values()) waiting.reject(err);
      this.waiting.clear();
    };
    worker.on('error', fail);
    worker.on('exit', (code) => {
      // The next write starts a thread again; what was in flight failed, and its callers were told.
      if (this.worker === worker) this.worker = undefined;
      fail(new Error(`the key store's writer thread stopped (exit code ${code})`));
    });
    this.worker = worker;
    return worker;
  }
}
