/**
 * Loaded into a worker's node with `--require` (the observability measure's `--heap-prof`): V8's sampling heap
 * profiler on the main thread, from SIGWINCH (sent once the measured rounds begin) to the process's exit, counting
 * every object allocated, the ones the garbage collector took since included, which is what a call costs the
 * collector. Node's own `--heap-prof` keeps only what is still alive when it stops, which says nothing of garbage.
 * The profile goes to `$OZ0_HEAP_PROF_FILE` (issue 36.7), and beside it (`.gc.json`) the main thread's collections
 * over the same span by kind, their count and milliseconds: whether the collector's time is young garbage or old.
 */
import fs from 'node:fs';
import inspector from 'node:inspector';
import v8 from 'node:v8';
import { PerformanceObserver, constants } from 'node:perf_hooks';
import type { PerformanceEntry } from 'node:perf_hooks';

const file = process.env.OZ0_HEAP_PROF_FILE;
if (file) {
  const session = new inspector.Session();
  session.connect();
  let sampling = false;
  const kinds: Record<number, string> = {
    [constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
    [constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
    [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
    [constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weak callbacks',
  };
  const reasons: Record<string, number> = {
    forced: constants.NODE_PERFORMANCE_GC_FLAGS_FORCED,
    'all available garbage': constants.NODE_PERFORMANCE_GC_FLAGS_ALL_AVAILABLE_GARBAGE,
    'external memory': constants.NODE_PERFORMANCE_GC_FLAGS_ALL_EXTERNAL_MEMORY,
    idle: constants.NODE_PERFORMANCE_GC_FLAGS_SCHEDULE_IDLE,
  };
  const gc: Record<string, { count: number; ms: number }> = {};
  const count = (entries: PerformanceEntry[]) => {
    for (const e of entries) {
      const { kind: k, flags } = e.detail as { kind: number; flags: number };
      // Why V8 collected, where it says: its memory reducer and external memory mark theirs.
      const why = Object.entries(reasons)
        .filter(([, bit]) => flags & bit)
        .map(([name]) => name);
      const kind = `${kinds[k] ?? 'other'}${why.length ? ` (${why.join(', ')})` : ''}`;
      gc[kind] ??= { count: 0, ms: 0 };
      gc[kind].count++;
      gc[kind].ms += e.duration;
    }
  };
  const observer = new PerformanceObserver((list) => count(list.getEntries()));
  // Not SIGUSR2 (Temporal's runtime shuts a worker down on it by default) nor SIGUSR1 (the inspector's): a window
  // change, which a node ignores unless told.
  process.on('SIGWINCH', () => {
    if (sampling) return;
    sampling = true;
    observer.observe({ entryTypes: ['gc'] });
    // The sampler makes each collection slower (it follows its samples' deaths): `OZ0_GC_ONLY=1` counts them without.
    if (process.env.OZ0_GC_ONLY === '1') return;
    // 8 KiB between samples: tens of thousands of samples over the measured rounds, at a small cost.
    session.post('HeapProfiler.startSampling', {
      samplingInterval: 8192,
      includeObjectsCollectedByMajorGC: true,
      includeObjectsCollectedByMinorGC: true,
    } as inspector.HeapProfiler.StartSamplingParameterType);
  });
  // An in-process session answers synchronously, so the profile is written before the process goes.
  process.on('exit', () => {
    if (!sampling) return;
    if (process.env.OZ0_GC_ONLY !== '1') {
      session.post('HeapProfiler.stopSampling', (err, result) => {
        if (!err) fs.writeFileSync(file, JSON.stringify(result.profile));
      });
    }
    count(observer.takeRecords());
    // The young generation's size at the end: how much a call may allocate between two scavenges.
    const spaces = Object.fromEntries(v8.getHeapSpaceStatistics().map((sp) => [sp.space_name, sp.space_size]));
    fs.writeFileSync(`${file}.gc.json`, JSON.stringify({ ...gc, spaces }));
  });
}
