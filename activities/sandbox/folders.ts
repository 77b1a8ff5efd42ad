/**
 * The folders a node makes for a job's processes (I2): a sandboxed server's and a harness session's. A job id may
 * hold `/`, `:`, `@` and anything else Temporal takes, so a name made by replacing characters collides (`col/N` and
 * `col_N` were one folder, and the first job to end deleted it under the other). A folder's name is a readable prefix
 * and a digest of the tenant, the job id and what else tells it apart; and a folder is made fresh, never taken over.
 */
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type { Logger } from '../../common/logger';

/** Whose a folder is: a job of a tenant (job ids are the namespace's, and a closed job's id may be taken again). */
export interface JobRef {
  tenant: string;
  jobId: string;
}

/** Hex digits of the digest in a folder's name: 80 bits, beyond any collision a tenant could search for. */
const DIGEST_HEX = 20;
/** The readable part is cut here: a name stays well under the file system's 255 bytes. */
const READABLE_MAX = 60;

/**
 * A folder's name: `<readable>-<digest>`, the readable part `[A-Za-z0-9_.-]` only (what a person looks for), the
 * digest over the exact parts (JSON: no two lists of strings encode alike), so two different owners never share one.
 */
export function folderName(readable: string, parts: readonly string[]): string {
  const digest = createHash('sha256').update(JSON.stringify(parts)).digest('hex').slice(0, DIGEST_HEX);
  const prefix = readable
    .replace(/[^A-Za-z0-9_.-]+/g, '_')
    .replace(/^[.]+/, '_')
    .slice(0, READABLE_MAX);
  return `${prefix}-${digest}`;
}

/** The folder of a job's sandboxed server: `<server>-<job>-<digest of tenant, job, server>`. */
export function sandboxFolderName(owner: JobRef, server: string): string {
  return folderName(`${server}-${owner.jobId}`, ['sandbox', owner.tenant, owner.jobId, server]);
}

/** The folder of one run of a harness session: `<job>-<session>-<run>-<digest>`. */
export function sessionFolderName(owner: JobRef, session: string, run: number): string {
  return folderName(`${owner.jobId}-${session}-${run}`, ['session', owner.tenant, owner.jobId, session, String(run)]);
}

/**
 * Makes `root/name` fresh. A folder already there was not made for this owner by this node (its root is the node's
 * own, made fresh at its start), so it is never taken over: another name is picked beside it, and the log says so.
 */
export function makeFreshFolder(root: string, name: string, logger: Logger): string {
  fs.mkdirSync(root, { recursive: true, mode: 0o755 });
  let dir = path.join(root, name);
  for (;;) {
    try {
      fs.mkdirSync(dir, { mode: 0o755 });
      return dir;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const taken = dir;
      dir = path.join(root, `${name}-${randomBytes(4).toString('hex')}`);
      logger.warn(
        { folder: taken, instead: dir },
        'a job’s folder was already there (not made by this node for it): it is left alone and a fresh one made beside it',
      );
    }
  }
}
