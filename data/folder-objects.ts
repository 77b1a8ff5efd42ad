/**
 * SPEC D2, one machine: objects in a folder, behind the same client interface Temporal's S3 driver calls
 * (`S3StorageDriverClient`), so the embedded default stores payloads exactly as a cluster's S3 store does — content
 * addressed by SHA-256, checked on read, in Temporal's key layout — with a folder per bucket and a file per key.
 * Each object is written beside its place and renamed in (complete or absent: two nodes share the folder safely),
 * readable by the node's user alone.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { S3RequestOptions, S3StorageDriverClient } from '@temporalio/external-storage-s3';

export class FolderObjects implements S3StorageDriverClient {
  constructor(readonly root: string) {}

  async putObject(bucket: string, key: string, data: Uint8Array, options?: S3RequestOptions): Promise<void> {
    options?.abortSignal?.throwIfAborted();
    const file = this.fileOf(bucket, key);
    await fs.promises.mkdir(path.dirname(file), { recursive: true, mode: 0o700 });
    const partial = `${file}.${randomBytes(6).toString('hex')}.partial`;
    try {
      await fs.promises.writeFile(partial, data, { mode: 0o600, flag: 'wx', signal: options?.abortSignal });
      await fs.promises.rename(partial, file);
    } catch (err) {
      await fs.promises.rm(partial, { force: true });
      throw err;
    }
  }

  async objectExists(bucket: string, key: string): Promise<boolean> {
    try {
      return (await fs.promises.stat(this.fileOf(bucket, key))).isFile();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return false;
      throw err;
    }
  }

  async getObject(bucket: string, key: string, options?: S3RequestOptions): Promise<Uint8Array> {
    const file = this.fileOf(bucket, key);
    try {
      return await fs.promises.readFile(file, { signal: options?.abortSignal });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        throw new Error(`no object ${key} in ${path.join(this.root, bucket)} (deleted, or stored on another machine)`);
      }
      throw err;
    }
  }

  describe(): Record<string, string> {
    return { folder: this.root };
  }

  /**
   * The file of an object. A key is `/`-separated segments that Temporal's driver percent-encodes, but a job id of
   * `..` stays `..`: such a segment is escaped, so no key leads outside the bucket's folder.
   */
  fileOf(bucket: string, key: string): string {
    const segments = [bucket, ...key.split('/')].map((s) => (/^\.*$/.test(s) ? `%2E${s}` : s));
    const file = path.join(this.root, ...segments);
    if (!file.startsWith(this.root + path.sep)) throw new Error(`an object key outside the store: ${key}`);
    return file;
  }
}
