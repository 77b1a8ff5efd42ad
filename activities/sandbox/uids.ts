/**
 * I1: a uid of its own for each sandbox, where the node runs as root and drops each sandbox to an unprivileged user.
 * Taken from `node.sandboxUids` and never given to two sandboxes at once, on this machine: each uid in use is held by
 * an exclusive `flock` on a file of its own in a folder every node of the machine shares ({@link LEASE_DIR}), so
 * several nodes share one range safely, and a node that dies lets go of its uids with its last file descriptor (its
 * sandboxes die with it: `--die-with-parent`). With its own uid a sandbox's processes count alone for RLIMIT_NPROC,
 * and no other sandbox can signal, trace or read it even where no PID namespace would part them.
 *
 * A lease's file says, while it is held, the write grants its sandbox may leave files in: a node that died before it
 * handed them over (./ownership.ts) leaves that list behind, and the next holder of the uid hands them over first.
 */
import fs from 'node:fs';
import path from 'node:path';
import { koffi } from './ffi';

/** Where leases live: /run is a tmpfs, empty after a reboot, as the processes that held them are. */
export const LEASE_DIR = '/run/oz0/uids';

const LOCK_EX = 2;
const LOCK_NB = 4;

type Flock = (fd: number, op: number) => number;
let flockFn: Flock | undefined;

function flock(): Flock {
  if (!flockFn) {
    flockFn = koffi().load('libc.so.6').func('int flock(int fd, int operation)') as Flock;
  }
  return flockFn;
}

export interface UidLease {
  uid: number;
  /** The write grants a node that died left behind with this uid, for the new holder to hand over before it runs. */
  leftBehind: string[];
  /** Records the write grants its sandbox may write, in case the node dies before it hands them over. */
  record(writeGrants: string[]): void;
  /** Lets the uid go (its sandbox is gone and what it left is handed over). */
  release(): void;
}

export class UidLeases {
  private next = 0;
  constructor(
    private readonly range: { first: number; count: number },
    private readonly dir = LEASE_DIR,
  ) {}

  /** A uid no other sandbox on this machine holds; throws when every one of the range is in use. */
  acquire(): UidLease {
    fs.mkdirSync(this.dir, { recursive: true, mode: 0o700 });
    const { first, count } = this.range;
    for (let i = 0; i < count; i++) {
      const uid = first + ((this.next + i) % count);
      const fd = fs.openSync(path.join(this.dir, String(uid)), fs.constants.O_RDWR | fs.constants.O_CREAT, 0o600);
      if (flock()(fd, LOCK_EX | LOCK_NB) !== 0) {
        fs.closeSync(fd);
        continue;
      }
      this.next = (this.next + i + 1) % count;
      return lease(uid, fd);
    }
    throw new Error(
      `every uid of node.sandboxUids (${first} to ${first + count - 1}) is held by a running sandbox on this machine`,
    );
  }
}

function lease(uid: number, fd: number): UidLease {
  let leftBehind: string[] = [];
  try {
    const text = fs.readFileSync(fd, 'utf8');
    if (text) leftBehind = (JSON.parse(text) as { write?: string[] }).write ?? [];
  } catch {
    // a file cut short by a crash: nothing to hand over is known
  }
  const write = (text: string) => {
    fs.ftruncateSync(fd);
    fs.writeSync(fd, text, 0);
  };
  let released = false;
  return {
    uid,
    leftBehind,
    record: (grants) => write(JSON.stringify({ write: grants })),
    release: () => {
      if (released) return;
      released = true;
      write('');
      // Closing the file's last descriptor lets the lock go; the file stays, so no other node can race its unlink.
      fs.closeSync(fd);
    },
  };
}
