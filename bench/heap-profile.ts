/**
 * What a sampling heap profile (bench/heap-sampler.ts) says a process allocated, summed as the CPU profiles are
 * (bench/cpu-profile.ts): bytes by the allocating function and its module (self), and by every module on the stack
 * (inclusive), so the MCP SDK's zod parses read as zod's self and the MCP SDK's inclusive (issue 36.7).
 */
import fs from 'node:fs';
import path from 'node:path';
import { moduleOf } from './cpu-profile';

interface SamplingNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: SamplingNode[];
}

export interface HeapProfileSummary {
  file: string;
  /** Every byte the profile counted (V8 scales its samples to an estimate of all allocations). */
  bytes: number;
  functions: Array<{ what: string; bytes: number }>;
  modules: Array<{ what: string; bytes: number }>;
  inclusive: Array<{ what: string; bytes: number }>;
  /** Bytes by the innermost frame of oz0's own code on the stack: what oz0 made a library allocate too. */
  ours: Array<{ what: string; bytes: number }>;
}

export function summarizeHeapProfile(file: string, top = 25): HeapProfileSummary {
  const head = (JSON.parse(fs.readFileSync(file, 'utf8')) as { head: SamplingNode }).head;
  const fns = new Map<string, number>();
  const mods = new Map<string, number>();
  const incl = new Map<string, number>();
  const ours = new Map<string, number>();
  const add = (m: Map<string, number>, k: string, v: number) => m.set(k, (m.get(k) ?? 0) + v);
  let bytes = 0;
  // Depth first, with the modules on the stack above each node counted once however many of their frames it holds.
  const walk = (node: SamplingNode, onStack: Map<string, number>, ourFrame: string) => {
    const { functionName, url, lineNumber } = node.callFrame;
    const name = functionName || '(anonymous)';
    const mod = moduleOf(url, name);
    const frame = url ? `${name} ${path.basename(url)}:${lineNumber + 1} [${mod}]` : name;
    const inner = mod.startsWith('oz0 ') ? frame : ourFrame;
    onStack.set(mod, (onStack.get(mod) ?? 0) + 1);
    if (node.selfSize > 0) {
      bytes += node.selfSize;
      add(fns, frame, node.selfSize);
      add(mods, mod, node.selfSize);
      add(ours, inner, node.selfSize);
      for (const m of onStack.keys()) add(incl, m, node.selfSize);
    }
    for (const c of node.children) walk(c, onStack, inner);
    const n = onStack.get(mod)! - 1;
    if (n === 0) onStack.delete(mod);
    else onStack.set(mod, n);
  };
  walk(head, new Map(), '(no oz0 frame)');
  const sorted = (m: Map<string, number>) =>
    [...m.entries()]
      .map(([what, b]) => ({ what, bytes: b }))
      .sort((a, b) => b.bytes - a.bytes)
      .slice(0, top);
  return { file, bytes, functions: sorted(fns), modules: sorted(mods), inclusive: sorted(incl), ours: sorted(ours) };
}

/** `node dist/bench/heap-profile.js CALLS FILE…`: prints each profile's summary in bytes a call. */
if (require.main === module) {
  const [calls, ...files] = process.argv.slice(2);
  const per = Number(calls);
  const kb = (b: number) => (b / per / 1024).toFixed(1).padStart(8);
  for (const file of files) {
    const s = summarizeHeapProfile(file, 40);
    process.stdout.write(`${file}: ${kb(s.bytes)} KiB a call over ${per} calls\n`);
    for (const [title, rows] of [
      ['self by module', s.modules],
      ['inclusive by module', s.inclusive],
      ['self by function', s.functions],
      ["by oz0's innermost frame", s.ours],
    ] as const) {
      process.stdout.write(`  ${title}, KiB a call\n`);
      for (const r of rows) process.stdout.write(`    ${kb(r.bytes)}  ${r.what}\n`);
    }
  }
}
