/**
 * What a heap snapshot holds (issue 26.4), summed by what V8 calls each object: its constructor for an object, else
 * its kind (string, code, array, closure, …). The memory measure takes one of every thread of an `oz0 worker` and of
 * the bare worker at the same point (every call running), with `--heap`: through bench/mem-probe.ts, preloaded into
 * each thread, so the SDK's workflow thread is read as well as the main one. With `--split` (issue 36.3) it also
 * reads where the rest of the resident memory is: the mappings (bench/smaps.ts) and each V8 heap by space.
 */
import fs from 'node:fs';
import path from 'node:path';
import { until } from './common';
import type { ThreadMemory } from './mem-probe';
import { mappedMiB } from './smaps';
import type { MappedMiB } from './smaps';

interface Snapshot {
  snapshot: { meta: { node_fields: string[]; node_types: [string[], ...unknown[]] } };
  nodes: number[];
  strings: string[];
}

export interface HeapSummary {
  totalMiB: number;
  /** MiB by what the objects are, largest first. */
  by: Array<{ what: string; count: number; mib: number }>;
}

/** Sums a `.heapsnapshot` file's objects by constructor (objects) or kind (everything else). */
export function summarizeHeap(file: string, top = 25): HeapSummary {
  const snap = JSON.parse(fs.readFileSync(file, 'utf8')) as Snapshot;
  const fields = snap.snapshot.meta.node_fields;
  const types = snap.snapshot.meta.node_types[0];
  const [iType, iName, iSize] = ['type', 'name', 'self_size'].map((f) => fields.indexOf(f));
  const sums = new Map<string, { count: number; bytes: number }>();
  let total = 0;
  for (let i = 0; i < snap.nodes.length; i += fields.length) {
    const type = types[snap.nodes[i + iType]];
    const size = snap.nodes[i + iSize];
    const what = type === 'object' || type === 'native' ? snap.strings[snap.nodes[i + iName]] : `(${type})`;
    const sum = sums.get(what) ?? { count: 0, bytes: 0 };
    sum.count++;
    sum.bytes += size;
    sums.set(what, sum);
    total += size;
  }
  const by = [...sums.entries()]
    .map(([what, s]) => ({ what, count: s.count, mib: s.bytes / 1024 / 1024 }))
    .sort((a, b) => b.mib - a.mib)
    .slice(0, top);
  return { totalMiB: total / 1024 / 1024, by };
}

/**
 * Has every thread of process `pid` (bench/mem-probe.ts preloaded, writing into `dir`) write a heap snapshot; their
 * paths, the main thread's first. Each thread writes while it is paused; done once it says so.
 */
export async function snapshotThreads(pid: number, dir: string): Promise<string[]> {
  const threads = probedThreads(pid, dir);
  fs.writeFileSync(path.join(dir, 'snapshot'), '');
  await until(
    "every thread's heap snapshot",
    () => threads.every((t) => fs.existsSync(path.join(dir, `${pid}-${t.threadId}.snapped`))) || undefined,
    300_000,
  );
  fs.rmSync(path.join(dir, 'snapshot'));
  return threads.map((t) => path.join(dir, `${pid}-${t.threadId}.heapsnapshot`));
}

/** What each thread of `pid` last wrote (bench/mem-probe.ts), the main thread first. */
export function probedThreads(pid: number, dir: string): ThreadMemory[] {
  return fs
    .readdirSync(dir)
    .filter((f) => f.startsWith(`${pid}-`) && f.endsWith('.json'))
    .map((f) => JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8')) as ThreadMemory)
    .sort((a, b) => a.threadId - b.threadId);
}

export interface MemorySplit {
  rssMiB: number;
  mapped: MappedMiB;
  /** Each thread's V8 heap, the main thread first: used and committed MiB, by space. */
  threads: Array<{
    threadId: number;
    usedMiB: number;
    committedMiB: number;
    mallocedMiB: number;
    spaces: Array<{ name: string; usedMiB: number; committedMiB: number }>;
  }>;
  externalMiB: number;
  arrayBuffersMiB: number;
  /** The main thread's loaded modules' source, by package (KiB), largest first. */
  modules: Array<{ what: string; kb: number }>;
}

/** Where process `pid`'s resident memory is now: its mappings (bench/smaps.ts) and each thread's V8 heap. */
export async function splitMemory(pid: number, dir: string): Promise<MemorySplit> {
  // Each thread writes four times a second: wait for a fresh round.
  const since = Date.now();
  await until(
    "every thread's memory",
    () => {
      const t = probedThreads(pid, dir);
      return t.length > 0 && t.every((x) => x.at > since) ? true : undefined;
    },
    30_000,
  );
  return readSplit(pid, dir);
}

/** The same, from what each thread wrote last (up to 250 ms old): for sampling while the process is busy. */
export function readSplit(pid: number, dir: string): MemorySplit {
  const threads = probedThreads(pid, dir);
  const mib = (b: number) => b / 1024 / 1024;
  const mapped = mappedMiB(pid);
  return {
    rssMiB: mapped.total,
    mapped,
    threads: threads.map((t) => ({
      threadId: t.threadId,
      usedMiB: mib(t.heap.used),
      committedMiB: mib(t.heap.committed),
      mallocedMiB: mib(t.heap.malloced),
      spaces: t.spaces.map((s) => ({ name: s.name, usedMiB: mib(s.used), committedMiB: mib(s.committed) })),
    })),
    externalMiB: mib(threads[0]!.external),
    arrayBuffersMiB: mib(threads[0]!.arrayBuffers),
    modules: threads[0]!.modules ?? [],
  };
}
