/**
 * What V8's own trace says of a process's collections (`node --trace-gc --trace-incremental-marking
 * --trace-gc-verbose`, on its stdout): each collection of its main isolate by kind and by why it ran — a scavenge's
 * "allocation failure" or "task"; a full collection's reason, which for an incremental one is the reason its marking
 * started ("memory reducer", "external memory pressure", "idle task", "allocation failure" …) — and the young
 * generation's size as each one left it (the "New space … committed" line). The observability measure's `--gc-trace`
 * keeps each worker's trace (issue 36.2, 36.7); also `node dist/bench/gc-trace.js FILE…`.
 */
import fs from 'node:fs';

export interface GcTraceSummary {
  /** Collections by kind and reason, over the window: count, milliseconds of pause in all. */
  kinds: Array<{ what: string; count: number; ms: number }>;
  /** The young generation's committed size (both semi-spaces) after each collection in the window, KiB: min, max, last. */
  newSpaceKiB: { min: number; max: number; last: number };
  /** The memory reducer's own lines (started, done, waiting), counted by what they say. */
  reducer: Array<{ what: string; count: number }>;
}

const LINE = /^\[\d+:(0x[0-9a-f]+)\]\s+(?:(\d+) ms: )?(.*)$/;
const GC = /^(Scavenge|Minor Mark-Compact|Mark-Compact(?: \(reduce\))?|Mark-Sweep-Compact)\b.*?, ([\d.]+) \/ [\d.]+ ms/;

/**
 * Sums the main isolate's collections from `fromMs` on (its own clock: milliseconds since the process started). The
 * main isolate is the first to write; the SDK's workflow threads are isolates of their own and left out.
 */
export function summarizeGcTrace(file: string, fromMs = 0): GcTraceSummary {
  const kinds = new Map<string, { count: number; ms: number }>();
  const reducer = new Map<string, number>();
  const sizes: number[] = [];
  let main: string | undefined;
  let marking: string | undefined;
  let now = 0;
  let afterGc = false;
  for (const raw of fs.readFileSync(file, 'utf8').split('\n')) {
    const m = LINE.exec(raw);
    if (!m) continue;
    const [, isolate, at, text] = m;
    main ??= isolate;
    if (isolate !== main) continue;
    if (at !== undefined) now = Number(at);
    if (now < fromMs) continue;
    const start = /\[IncrementalMarking\] Start \(([^)]*)\)/.exec(text);
    if (start) {
      marking = start[1];
      continue;
    }
    if (text.startsWith('Memory reducer: ')) {
      const what = text
        .slice(16)
        .replace(/#\d+|[\d.]+ ms/g, '')
        .trim();
      reducer.set(what, (reducer.get(what) ?? 0) + 1);
      continue;
    }
    const gc = GC.exec(text);
    if (gc) {
      const reason = /current mu = [\d.]+\) (.*?);?\s*$/.exec(text)?.[1] ?? '?';
      const full = !gc[1].startsWith('Scavenge') && !gc[1].startsWith('Minor');
      // An incremental full collection is finished by a task or the stack guard: its cause is why marking began.
      const why = full && /^finalize incremental marking/.test(reason) && marking ? `${marking} (incremental)` : reason;
      if (full) marking = undefined;
      const key = `${gc[1]}: ${why.replace(/; GC in old space requested$/, '')}`;
      const k = kinds.get(key) ?? { count: 0, ms: 0 };
      k.count++;
      k.ms += Number(gc[2]);
      kinds.set(key, k);
      afterGc = true;
      continue;
    }
    const space = /^New space,.*committed:\s+(\d+) KB/.exec(text);
    if (space && afterGc) {
      sizes.push(Number(space[1]));
      afterGc = false;
    }
  }
  return {
    kinds: [...kinds].map(([what, k]) => ({ what, ...k })).sort((a, b) => b.count - a.count),
    newSpaceKiB: {
      min: sizes.length ? Math.min(...sizes) : 0,
      max: sizes.length ? Math.max(...sizes) : 0,
      last: sizes.at(-1) ?? 0,
    },
    reducer: [...reducer].map(([what, count]) => ({ what, count })).sort((a, b) => b.count - a.count),
  };
}

/** The flags that make a node write the trace this file reads. */
export const GC_TRACE_FLAGS = ['--trace-gc', '--trace-incremental-marking', '--trace-gc-verbose'];

/** `node dist/bench/gc-trace.js FILE…`: each trace's collections, from its start. */
if (require.main === module) {
  for (const file of process.argv.slice(2)) {
    const s = summarizeGcTrace(file);
    process.stdout.write(`${file}: young generation ${s.newSpaceKiB.min}–${s.newSpaceKiB.max} KiB committed\n`);
    for (const k of s.kinds)
      process.stdout.write(`  ${String(k.count).padStart(5)} × ${k.what}, ${k.ms.toFixed(1)} ms\n`);
    for (const r of s.reducer) process.stdout.write(`  memory reducer: ${r.what} × ${r.count}\n`);
  }
}
