/**
 * What a V8 CPU profile (`node --cpu-prof`) says a process spent its time on, summed two ways: self time by function
 * (where the samples landed) and by module (a package, an oz0 folder, Node's own code, the garbage collector), and
 * the time each module was anywhere on the stack (inclusive), which names what a call's work went through. The
 * observability measure takes one of each worker with `--cpu-prof` (issue 36.2).
 */
import fs from 'node:fs';
import path from 'node:path';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}

interface CpuProfile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples?: number[];
  timeDeltas?: number[];
}

export interface ProfileSummary {
  file: string;
  /** Wall time the profile covers, and of it the time some code ran (not idle). */
  totalMs: number;
  busyMs: number;
  /** Self time by function, largest first. */
  functions: Array<{ what: string; ms: number }>;
  /** Self time by module, largest first. */
  modules: Array<{ what: string; ms: number }>;
  /** Time each module was on the stack at all, largest first. */
  inclusive: Array<{ what: string; ms: number }>;
}

/** The module a frame belongs to: `pkg` for node_modules, `oz0 <folder>` for dist/, `node:…`, or V8's own names. */
export function moduleOf(url: string, functionName: string): string {
  if (!url) return functionName.startsWith('(') ? functionName : '(native)';
  const nm = url.lastIndexOf('node_modules/');
  if (nm >= 0) {
    const parts = url.slice(nm + 'node_modules/'.length).split('/');
    return parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0];
  }
  if (url.startsWith('node:')) return 'node:' + url.slice(5).split('/')[0];
  const dist = url.indexOf('/dist/');
  if (dist >= 0) return `oz0 ${url.slice(dist + 6).split('/')[0]}`;
  return url.replace(/^file:\/\//, '');
}

/**
 * Sums one `.cpuprofile` file; with `fromMs`, only the samples taken that long after the profile began (a worker's
 * start-up, its modules loaded, left out).
 */
export function summarizeProfile(file: string, top = 25, fromMs = 0): ProfileSummary {
  const profile = JSON.parse(fs.readFileSync(file, 'utf8')) as CpuProfile;
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  // Each sample's time: the delta to the next sample (V8's own way of weighing them); hitCount when there are none.
  const selfMs = new Map<number, number>();
  let totalMs = (profile.endTime - profile.startTime) / 1000;
  if (profile.samples && profile.timeDeltas) {
    let at = 0;
    for (let i = 0; i < profile.samples.length; i++) {
      at += profile.timeDeltas[i] / 1000;
      if (at < fromMs) continue;
      const ms = (profile.timeDeltas[i + 1] ?? 0) / 1000;
      selfMs.set(profile.samples[i], (selfMs.get(profile.samples[i]) ?? 0) + ms);
    }
    totalMs -= Math.min(fromMs, totalMs);
  } else {
    const hits = profile.nodes.reduce((s, n) => s + (n.hitCount ?? 0), 0);
    const per = (profile.endTime - profile.startTime) / 1000 / Math.max(1, hits);
    for (const n of profile.nodes) selfMs.set(n.id, (n.hitCount ?? 0) * per);
  }
  const fns = new Map<string, number>();
  const mods = new Map<string, number>();
  const incl = new Map<string, number>();
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  let busy = 0;
  for (const [id, ms] of selfMs) {
    const node = byId.get(id)!;
    const { functionName, url, lineNumber } = node.callFrame;
    const name = functionName || '(anonymous)';
    const mod = moduleOf(url, name);
    add(fns, url ? `${name} ${path.basename(url)}:${lineNumber + 1} [${mod}]` : name, ms);
    add(mods, mod, ms);
    if (name !== '(idle)') busy += ms;
    // Inclusive: each module once per sample, however many of its frames are on the stack.
    const seen = new Set<string>();
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const f = byId.get(at)!.callFrame;
      seen.add(moduleOf(f.url, f.functionName || '(anonymous)'));
    }
    for (const m of seen) add(incl, m, ms);
  }
  const sorted = (m: Map<string, number>) =>
    [...m.entries()]
      .map(([what, ms]) => ({ what, ms }))
      .sort((a, b) => b.ms - a.ms)
      .slice(0, top);
  return {
    file,
    totalMs,
    busyMs: busy,
    functions: sorted(fns),
    modules: sorted(mods),
    inclusive: sorted(incl),
  };
}

/** The profile files a process started with `--cpu-prof --cpu-prof-dir=dir` wrote (one per thread). */
export function profilesIn(dir: string): string[] {
  if (!fs.existsSync(dir)) return [];
  return fs
    .readdirSync(dir)
    .filter((f) => f.endsWith('.cpuprofile'))
    .map((f) => path.join(dir, f));
}

/** `node dist/bench/cpu-profile.js FILE…`: prints each profile's summary. */
if (require.main === module) {
  for (const file of process.argv.slice(2)) {
    const s = summarizeProfile(file, 30);
    process.stdout.write(`${file}: ${s.busyMs.toFixed(0)} ms busy of ${s.totalMs.toFixed(0)}\n`);
    for (const [title, rows] of [
      ['self by module', s.modules],
      ['inclusive by module', s.inclusive],
      ['self by function', s.functions],
    ] as const) {
      process.stdout.write(`  ${title}\n`);
      for (const r of rows) process.stdout.write(`    ${r.ms.toFixed(1).padStart(9)} ms  ${r.what}\n`);
    }
  }
}
