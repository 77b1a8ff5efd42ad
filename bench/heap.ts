/**
 * What a heap snapshot holds (issue 26.4), summed by what V8 calls each object: its constructor for an object, else
 * its kind (string, code, array, closure, …). The memory measure takes one of an `oz0 worker` and one of the bare
 * worker at the same point (every call running), with `--heap`: `--heapsnapshot-signal`, then SIGUSR2. A snapshot
 * is of the process's main thread; the workflow threads' isolates and native memory (the SDK's core, its buffers)
 * are the rest of the resident memory, which the measure reports beside it.
 */
import fs from 'node:fs';
import path from 'node:path';
import { sleep, until } from './common';

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

/** Has process `pid` (started with `--heapsnapshot-signal=SIGUSR2`, its cwd `dir`) write a snapshot; its path. */
export async function takeHeapSnapshot(pid: number, dir: string): Promise<string> {
  const before = new Set(fs.readdirSync(dir));
  process.kill(pid, 'SIGUSR2');
  const file = await until(
    'the heap snapshot',
    () => fs.readdirSync(dir).find((f) => f.endsWith('.heapsnapshot') && !before.has(f)),
    120_000,
  );
  // Written while the process is paused; done when its size stops changing.
  let size = -1;
  for (;;) {
    await sleep(500);
    const now = fs.statSync(path.join(dir, file)).size;
    if (now === size && now > 0) return path.join(dir, file);
    size = now;
  }
}
