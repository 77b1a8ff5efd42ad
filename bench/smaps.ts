/**
 * Issue 36.3: a process's resident memory by where the kernel has it mapped (`/proc/<pid>/smaps`), so that what no
 * JS heap holds is read rather than guessed: code and data of the files it runs (the node binary, the Temporal core's
 * `.node` library, the rest), glibc's main malloc arena (`[heap]`), its threads' arenas (anonymous regions glibc
 * maps 64 MiB-aligned, one per arena), and the other anonymous memory (V8's heaps, thread stacks, Rust's own mmaps).
 */
import fs from 'node:fs';

export interface MappedMiB {
  nodeBinary: number;
  temporalCore: number;
  otherFiles: number;
  /** glibc's main arena (brk). */
  mallocMain: number;
  /** glibc's thread arenas, and how many. */
  mallocArenas: number;
  arenas: number;
  /** Every other anonymous mapping: V8's heaps and code, stacks, large mallocs (mmap'ed), Rust's own. */
  otherAnon: number;
  total: number;
  threads: number;
  /** The process's threads by name (`/proc/<pid>/task/<tid>/comm`), with how many of each. */
  threadNames: Record<string, number>;
}

const ARENA = 64 * 1024 * 1024;

/** Reads `/proc/<pid>/smaps` and sums its resident kB by kind, in MiB. */
export function mappedMiB(pid: number): MappedMiB {
  const text = fs.readFileSync(`/proc/${pid}/smaps`, 'utf8');
  const out: MappedMiB = {
    nodeBinary: 0,
    temporalCore: 0,
    otherFiles: 0,
    mallocMain: 0,
    mallocArenas: 0,
    arenas: 0,
    otherAnon: 0,
    total: 0,
    threads: 0,
    threadNames: {},
  };
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    let name: string;
    try {
      name = fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
    } catch {
      continue; // The thread ended since the listing.
    }
    out.threadNames[name] = (out.threadNames[name] ?? 0) + 1;
    out.threads++;
  }
  let kind: keyof MappedMiB = 'otherAnon';
  for (const line of text.split('\n')) {
    const head = /^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \S+\s*(.*)$/.exec(line);
    if (head) {
      const start = BigInt(`0x${head[1]}`);
      const name = head[4];
      if (name === '[heap]') kind = 'mallocMain';
      else if (name.includes('temporal') && name.endsWith('.node')) kind = 'temporalCore';
      else if (name === process.execPath || /\/bin\/node$/.test(name)) kind = 'nodeBinary';
      else if (name.startsWith('/')) kind = 'otherFiles';
      else if (head[3].startsWith('rw') && start % BigInt(ARENA) === 0n) {
        kind = 'mallocArenas';
        out.arenas++;
      } else kind = 'otherAnon';
      continue;
    }
    const rss = /^Rss:\s+(\d+) kB/.exec(line);
    if (rss) {
      const mib = Number(rss[1]) / 1024;
      (out[kind] as number) += mib;
      out.total += mib;
    }
  }
  return out;
}
