/**
 * `oz0 plugin test --drill`: that a write oz0 makes again under its key is made once. Every such function (it says
 * `idempotentHint: true` and honours the key) is called as oz0 would call it again — the same key twice, a cancel
 * then its repeat, a restart of the server, the same arguments under a new key, the key with other arguments — and
 * its answers and its effect count are checked. The rules are in docs/plugin-authors.md, "The drill".
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { CallToolResult, Tool } from '@modelcontextprotocol/client';
import { canonicalize } from 'json-canonicalize';
import type { ServerKind } from '../../common/config';
import { contentText } from '../../common/text';
import type { DrillFile, FunctionDrill } from './drill-file';
import { isKeyedWrite } from './listing-checks';

/** One call the drill makes. */
export interface DrillCall {
  name: string;
  args: Record<string, unknown>;
  /** `_meta["oz0/idempotency_key"]`. */
  key: string;
  signal?: AbortSignal;
  /** Asks for progress; called at each notification. */
  onProgress?: () => void;
}

/** The server under drill, as the drill sees it. */
export interface DrillTarget {
  kind: ServerKind;
  /** Makes one `tools/call`; rejects when no answer came (cancelled, failed, timed out). */
  call(call: DrillCall): Promise<CallToolResult>;
  /** What oz0 does after it cancels a call: stops a sandboxed server (C3); nothing for the others. */
  afterCancel(): Promise<void>;
  /** Kills the server (SIGKILL, as a lost node) and starts a fresh one; absent when the drill cannot (remote). */
  restart?(): Promise<void>;
}

/** The cases, in the order the report shows them. */
export const CASES = ['same-key', 'cancelled', 'restart', 'new-key', 'other-args'] as const;
export type CaseName = (typeof CASES)[number];

export interface CaseResult {
  case: CaseName;
  result: 'pass' | 'fail' | 'skip';
  note: string;
}

export interface FunctionResult {
  function: string;
  /** Why the function could not be drilled at all; counts as a failure. */
  problem?: string;
  cases: CaseResult[];
}

export interface DrillReport {
  functions: FunctionResult[];
  passed: number;
  failed: number;
  skipped: number;
}

/** The reason the drill gives its cancels, as the server's `notifications/cancelled` shows it. */
export const DRILL_CANCEL_REASON = 'oz0 plugin test: drill cancel';

/** A case that cannot pass: its message is the note. */
class CaseFailure extends Error {}

/** An answer as the drill compares answers: what a model would read of it. */
function answerOf(result: CallToolResult): string {
  return canonicalize({
    isError: result.isError === true,
    content: result.content ?? [],
    structuredContent: result.structuredContent ?? null,
  });
}

function same(a: CallToolResult, b: CallToolResult): boolean {
  return answerOf(a) === answerOf(b);
}

function textOf(result: CallToolResult): string {
  return contentText(result.content);
}

/** An answer in a few words, for a note. */
function brief(result: CallToolResult): string {
  const text = textOf(result).replace(/\s+/g, ' ').trim() || JSON.stringify(result.structuredContent ?? {});
  const cut = text.length > 70 ? `${text.slice(0, 67)}...` : text;
  return `${result.isError ? 'error ' : ''}"${cut}"`;
}

/** The value at a dotted path of an answer's structured content, else of its text parsed as JSON. */
function valueAt(result: CallToolResult, path: string): unknown {
  let value: unknown = result.structuredContent;
  if (value === undefined) {
    try {
      value = JSON.parse(textOf(result));
    } catch {
      return undefined;
    }
  }
  for (const part of path.split('.')) {
    if (value === null || typeof value !== 'object' || !Object.hasOwn(value, part)) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

/** Drills one function: the cases share its first answer and its keys. */
class FunctionDrillRun {
  private readonly uuid = randomUUID();
  private counts = 0;
  /** The answer of case same-key's first call, which the later cases compare with. */
  first?: CallToolResult;

  constructor(
    private readonly target: DrillTarget,
    private readonly file: DrillFile,
    readonly name: string,
    private readonly spec: FunctionDrill,
  ) {}

  /** `oz0-drill/<uuid>/<case>`: a key of this run of this function. */
  key(what: string): string {
    return `oz0-drill/${this.uuid}/${what}`;
  }

  private call(args: Record<string, unknown>, key: string, extra: Partial<DrillCall> = {}): Promise<CallToolResult> {
    return this.target.call({ name: this.name, args, key, ...extra }).catch((err: unknown) => {
      if (extra.signal?.aborted) throw err;
      throw new CaseFailure(`the call under ${key} got no answer: ${(err as Error).message}`);
    });
  }

  /** The effect count now, or `undefined` without a count function. */
  private async count(settle = false): Promise<number | undefined> {
    const spec = this.spec.count;
    if (!spec) return undefined;
    if (settle) await sleep(this.file.settleMs);
    const result = await this.target
      .call({ name: spec.function, args: spec.args, key: this.key(`count/${++this.counts}`) })
      .catch((err: unknown) => {
        throw new CaseFailure(`the count function ${spec.function} got no answer: ${(err as Error).message}`);
      });
    if (result.isError) throw new CaseFailure(`the count function ${spec.function} answered ${brief(result)}`);
    const value = valueAt(result, spec.path);
    if (typeof value !== 'number' || !Number.isFinite(value)) {
      throw new CaseFailure(`the count function ${spec.function} gave no number at "${spec.path}" (${brief(result)})`);
    }
    return value;
  }

  async sameKey(): Promise<string> {
    const key = this.key('same-key');
    const c0 = await this.count();
    const first = await this.call(this.spec.args, key);
    if (first.isError) throw new CaseFailure(`the first call answered ${brief(first)}: give args that succeed`);
    this.first = first;
    const again = await this.call(this.spec.args, key);
    const c1 = await this.count(true);
    const problems: string[] = [];
    if (!same(first, again)) problems.push(`answered ${brief(first)}, then ${brief(again)} under the same key`);
    const rise = c0 === undefined || c1 === undefined ? undefined : c1 - c0;
    if (rise !== undefined && rise !== 1) problems.push(`the count rose by ${rise} across two calls under one key`);
    if (problems.length) throw new CaseFailure(problems.join('; '));
    return `the same answer twice${rise === undefined ? '' : '; the count rose by 1'}`;
  }

  async cancelled(): Promise<string> {
    const key = this.key('cancelled');
    const args = this.spec.cancelArgs ?? this.spec.args;
    const c0 = await this.count();
    const abort = new AbortController();
    const cancel = () => abort.abort(DRILL_CANCEL_REASON);
    const started = Date.now();
    const timer = setTimeout(cancel, this.file.cancelAfterMs);
    let before: CallToolResult | undefined;
    try {
      before = await this.call(args, key, { signal: abort.signal, onProgress: cancel });
    } catch (err) {
      if (!abort.signal.aborted) throw err;
    } finally {
      clearTimeout(timer);
    }
    const ms = Date.now() - started;
    if (before?.isError) throw new CaseFailure(`the call answered ${brief(before)} before the cancel`);
    await this.target.afterCancel();
    // Counted at once, not after a settle: the repeat must come while a cancelled handler may still be unwinding.
    const mid = await this.count();
    const repeat = await this.call(args, key);
    if (repeat.isError) throw new CaseFailure(`the repeat under the cancelled call's key answered ${brief(repeat)}`);
    if (before && !same(before, repeat)) {
      throw new CaseFailure(`answered ${brief(before)}, then ${brief(repeat)} under the same key`);
    }
    const c1 = await this.count(true);
    const how = before
      ? `the call answered in ${ms} ms, before the cancel (give cancelArgs that run longer to drill a cancel mid-call)`
      : `cancelled after ${ms} ms`;
    if (c0 === undefined || c1 === undefined || mid === undefined) {
      const third = await this.call(args, key);
      if (!same(repeat, third)) throw new CaseFailure(`the repeat answered ${brief(repeat)}, then ${brief(third)}`);
      return `${how}; the repeat answered and keeps its answer (no count function: whether it acted once is unseen)`;
    }
    const tookEffect = mid - c0;
    if (c1 - c0 !== 1) {
      throw new CaseFailure(
        `${how}; the count rose by ${c1 - c0} across the cancelled call and its repeat (${tookEffect} by the ` +
          `repeat): ${c1 - c0 === 0 ? 'the repeat answered but did nothing' : 'the write was done more than once'}`,
      );
    }
    return `${how}; ${tookEffect === 1 ? 'it had taken effect, and the repeat did not act again' : 'it had not taken effect, and the repeat made it'}: the count rose by 1`;
  }

  async newKey(): Promise<string> {
    const c0 = await this.count();
    const result = await this.call(this.spec.args, this.key('new-key'));
    if (result.isError) throw new CaseFailure(`under a new key it answered ${brief(result)}`);
    const c1 = await this.count(true);
    if (c0 !== undefined && c1 !== undefined) {
      if (c1 - c0 === 1) return 'acted again: the count rose by 1';
      throw new CaseFailure(
        c1 === c0
          ? `did nothing under a new key (the count did not rise): it dedupes by arguments, not by key`
          : `the count rose by ${c1 - c0} for one call under a new key`,
      );
    }
    if (!this.first) throw new CaseFailure('case same-key gave no answer to compare with, and there is no count');
    if (same(result, this.first)) {
      throw new CaseFailure(
        `answered ${brief(result)} under a new key, the first key's answer: it may dedupe by arguments ` +
          '(give a count function if its answers are equal by design)',
      );
    }
    return `a new answer under a new key: ${brief(result)}`;
  }

  async otherArgs(): Promise<string | { skip: string }> {
    const other = this.spec.otherArgs;
    if (!other) return { skip: 'no otherArgs in the drill file' };
    if (!this.first) return { skip: 'case same-key gave no answer to refuse against' };
    const fresh = await this.call(other, this.key('other-args'));
    if (fresh.isError) {
      throw new CaseFailure(
        `otherArgs are refused under a fresh key too (${brief(fresh)}): fix them in the drill file`,
      );
    }
    const key = this.key('same-key');
    const c0 = await this.count();
    const reused = await this.call(other, key);
    const c1 = await this.count(true);
    const back = await this.call(this.spec.args, key);
    const problems: string[] = [];
    if (!reused.isError) problems.push(`took a used key with other arguments and answered ${brief(reused)}`);
    if (c0 !== undefined && c1 !== undefined && c1 !== c0) problems.push(`the count rose by ${c1 - c0}`);
    if (!same(back, this.first)) problems.push(`the key then answers ${brief(back)}, not its first answer`);
    if (problems.length) throw new CaseFailure(problems.join('; '));
    return `refused: ${brief(reused)}`;
  }

  async restart(): Promise<string | { skip: string }> {
    if (!this.first) return { skip: 'case same-key gave no answer to compare with' };
    const c0 = await this.count();
    const result = await this.call(this.spec.args, this.key('same-key'));
    const c1 = await this.count(true);
    const problems: string[] = [];
    if (!same(result, this.first)) {
      problems.push(`after a restart the key answers ${brief(result)}, not ${brief(this.first)}: keys kept in memory?`);
    }
    if (c0 !== undefined && c1 !== undefined && c1 !== c0) problems.push(`the count rose by ${c1 - c0}`);
    if (problems.length) throw new CaseFailure(problems.join('; '));
    return 'the same answer after a restart (the server was killed with SIGKILL)';
  }
}

async function runCase(
  name: CaseName,
  fn: () => Promise<string | { skip: string }>,
  results: CaseResult[],
): Promise<void> {
  try {
    const note = await fn();
    results.push(
      typeof note === 'string' ? { case: name, result: 'pass', note } : { case: name, result: 'skip', note: note.skip },
    );
  } catch (err) {
    const note = err instanceof CaseFailure ? err.message : `the drill failed: ${(err as Error).message}`;
    results.push({ case: name, result: 'fail', note });
  }
}

/** Which functions the drill runs, and why the others named on either side cannot be drilled. */
function plan(tools: Tool[], file: DrillFile): { runs: Array<[string, FunctionDrill]>; problems: FunctionResult[] } {
  const byName = new Map(tools.map((t) => [t.name, t]));
  const runs: Array<[string, FunctionDrill]> = [];
  const problems: FunctionResult[] = [];
  const problem = (fn: string, why: string) => problems.push({ function: fn, problem: why, cases: [] });
  for (const [name, spec] of Object.entries(file.functions)) {
    const tool = byName.get(name);
    if (!tool) problem(name, 'the drill file names it, but the server lists no such function');
    else if (!isKeyedWrite(tool)) {
      problem(name, 'not a write made again under its key (idempotentHint: true and honours the key): not drilled');
    } else if (spec.count && !byName.has(spec.count.function)) {
      problem(name, `its count function ${spec.count.function} is not in the listing`);
    } else runs.push([name, spec]);
  }
  for (const tool of tools) {
    if (isKeyedWrite(tool) && !Object.hasOwn(file.functions, tool.name)) {
      problem(tool.name, 'a write made again under its key, with no entry in the drill file: give its args');
    }
  }
  return { runs, problems };
}

/** Runs every case for every keyed write the drill file gives arguments for. */
export async function runDrill(target: DrillTarget, tools: Tool[], file: DrillFile): Promise<DrillReport> {
  const { runs, problems } = plan(tools, file);
  const drills = runs.map(([name, spec]) => ({
    run: new FunctionDrillRun(target, file, name, spec),
    results: [] as CaseResult[],
  }));
  for (const { run, results } of drills) {
    await runCase('same-key', () => run.sameKey(), results);
    await runCase('cancelled', () => run.cancelled(), results);
    await runCase('new-key', () => run.newKey(), results);
    await runCase('other-args', () => run.otherArgs(), results);
  }
  // One restart for all: every function's key from case same-key is asked again of the fresh process.
  let restarted: string | undefined;
  if (drills.length && target.restart) {
    restarted = await target.restart().then(
      () => undefined,
      (err: unknown) => `the server could not be restarted: ${(err as Error).message}`,
    );
  }
  for (const { run, results } of drills) {
    if (!target.restart) {
      results.push({ case: 'restart', result: 'skip', note: 'a remote server is not the drill’s to restart' });
    } else if (restarted) {
      results.push({ case: 'restart', result: 'fail', note: restarted });
    } else {
      await runCase('restart', () => run.restart(), results);
    }
    results.sort((a, b) => CASES.indexOf(a.case) - CASES.indexOf(b.case));
  }
  const functions = [...drills.map(({ run, results }) => ({ function: run.name, cases: results })), ...problems];
  const all = functions.flatMap((f) => f.cases);
  return {
    functions,
    passed: all.filter((c) => c.result === 'pass').length,
    failed: all.filter((c) => c.result === 'fail').length + problems.length,
    skipped: all.filter((c) => c.result === 'skip').length,
  };
}
