/**
 * Issue 36.3: what each thread of a measured worker holds, from inside it. Preloaded with `--require` into a worker
 * process (Node preloads it into every worker thread too, so the SDK's workflow thread is read as well as the main
 * one) when `OZ0_MEM_PROBE` names a folder: four times a second each thread writes its V8 heap by space (used, committed)
 * and the process's external and array-buffer memory to `<folder>/<pid>-<threadId>.json`; a file `snapshot` put in
 * the folder has each thread write a heap snapshot there once (`<pid>-<threadId>.heapsnapshot`), which a signal
 * cannot do for a worker thread.
 */
import fs from 'node:fs';
import path from 'node:path';
import v8 from 'node:v8';
import { isMainThread, threadId } from 'node:worker_threads';

export interface ThreadMemory {
  pid: number;
  threadId: number;
  main: boolean;
  at: number;
  /** By V8 space: bytes used and committed (physical). */
  spaces: Array<{ name: string; used: number; committed: number }>;
  /** The whole heap (all spaces): used, committed, and malloced memory V8 counts. */
  heap: { used: number; committed: number; malloced: number; peakMalloced: number };
  /** Process-wide (the same from every thread): bytes outside the heap held by JS objects. */
  external: number;
  arrayBuffers: number;
  /** Main thread: the source bytes of the modules it loaded, by package (or oz0's folder), largest first. */
  modules?: Array<{ what: string; kb: number }>;
}

/** What `require` loaded in this thread, summed by package, from the files' sizes. */
let modulesSeen = -1;
let modulesBy: Array<{ what: string; kb: number }> = [];
function loadedModules(): Array<{ what: string; kb: number }> {
  const files = Object.keys(require.cache);
  if (files.length === modulesSeen) return modulesBy;
  modulesSeen = files.length;
  const by = new Map<string, number>();
  for (const file of files) {
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(file)?.[1] ?? `oz0 ${path.basename(path.dirname(file))}/`;
    let size = 0;
    try {
      size = fs.statSync(file).size;
    } catch {
      // A module loaded from elsewhere than a file.
    }
    by.set(pkg, (by.get(pkg) ?? 0) + size);
  }
  modulesBy = [...by.entries()].map(([what, b]) => ({ what, kb: Math.round(b / 1024) })).sort((a, b) => b.kb - a.kb);
  return modulesBy;
}

function read(): ThreadMemory {
  const s = v8.getHeapStatistics();
  const usage = process.memoryUsage();
  return {
    pid: process.pid,
    threadId,
    main: isMainThread,
    at: Date.now(),
    spaces: v8.getHeapSpaceStatistics().map((x) => ({
      name: x.space_name,
      used: x.space_used_size,
      committed: x.physical_space_size,
    })),
    heap: {
      used: s.used_heap_size,
      committed: s.total_physical_size,
      malloced: s.malloced_memory,
      peakMalloced: s.peak_malloced_memory,
    },
    external: usage.external,
    arrayBuffers: usage.arrayBuffers,
    ...(isMainThread ? { modules: loadedModules() } : {}),
  };
}

const dir = process.env.OZ0_MEM_PROBE;
if (dir) {
  const base = path.join(dir, `${process.pid}-${threadId}`);
  let snapped = false;
  setInterval(() => {
    // Whole or not at all: the bench reads it at any moment.
    fs.writeFileSync(`${base}.tmp`, JSON.stringify(read()));
    fs.renameSync(`${base}.tmp`, `${base}.json`);
    if (!snapped && fs.existsSync(path.join(dir, 'snapshot'))) {
      snapped = true;
      v8.writeHeapSnapshot(`${base}.heapsnapshot`);
      fs.writeFileSync(`${base}.snapped`, '');
    }
  }, 250).unref();
}
