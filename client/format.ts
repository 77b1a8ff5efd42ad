/** Human-readable output of the CLI: a job's trace, a tenant's policy and the calls that wait for a person, as tables. */
import type { TenantState } from '../model/schemas';
import { contentText, table } from '../common/text';
import { callsOf, isSessionTrace } from '../model/job';
import type { QuestionTrace, SessionTrace, StepTrace, ToolResult, WaitTrace } from '../model/job';
import { waitedInWords } from './calls';
import type { ListedCall } from './calls';
import type { ShownTrace } from './jobs';
import type { TenantShown } from './tenants';
import { TENANT_SCOPE, serverScope } from '../model/shares';
import type { Source } from '../model/origins';

/**
 * A result as one line of at most 80 characters: its text parts, `[image]` for others; ERROR first for an error. An
 * answer kept in the store (D3) says what it holds: `[stored: image/png 1.5 MiB]` (`--json` has it whole).
 */
function textOf(result: ToolResult): string {
  const stored = result.stored && !result.content.length ? `[stored: ${result.stored.holds}]` : '';
  const flat = stored || contentText(result.content).replace(/\s+/g, ' ').trim();
  return `${result.isError ? 'ERROR ' : ''}${flat.length > 80 ? `${flat.slice(0, 77)}...` : flat}`;
}

function resultText(step: StepTrace): string {
  return textOf(step.result);
}

function attemptsText(step: StepTrace): string {
  return step.attempts.map((a) => `${a.attempt}:${a.outcome}`).join(' ') || '-';
}

/** A4-A6: a call's question and how it ended, as one line of the notes. */
export function questionText(q: QuestionTrace): string {
  const asked = `asked ${q.askedAt} (${q.pattern}: confirm)`;
  const a = q.answer;
  if (a) {
    const how = `${a.approved ? 'approved' : 'denied'} by ${a.by} at ${a.at}${a.reason ? `: ${a.reason}` : ''}`;
    return `${asked}, ${how}`;
  }
  return q.ended ? `${asked}, ${q.ended}` : `${asked}, waiting`;
}

/** A live session's line above its calls: what it runs, its runs and nodes, and how it ended. */
function sessionLine(s: SessionTrace): string {
  const what = s.kind === 'harness' ? `harness ${s.harness}` : 'external client';
  const runs = s.runs.map((r) => `run ${r.run}${r.node ? ` on ${r.node}` : ''}${r.ended ? ` (${r.ended})` : ''}`);
  const result = s.result ? `: ${textOf(s.result)}` : '';
  const omitted = s.omitted ? `, ${s.omitted} earlier calls not shown` : '';
  return `session ${s.session}, ${what}, ${s.status}${runs.length ? `; ${runs.join('; ')}` : ''}${omitted}${result}`;
}

/** A column of the trace's table: its head, the field of a call's step it shows, and how. */
export interface TraceColumn {
  head: string;
  field: keyof StepTrace;
  cell(step: StepTrace): string;
}

/**
 * The trace's table, column by column: each shows one field of a call's step, which {@link traceJson} keeps with every
 * other field. `mcp`: the MCP revision the call's server spoke (2026-07-28, or the handshake's 2025-11-25 or older).
 */
export const TRACE_COLUMNS: readonly TraceColumn[] = [
  { head: '#', field: 'n', cell: (s) => String(s.n) },
  { head: 'tool', field: 'tool', cell: (s) => s.tool },
  { head: 'key', field: 'key', cell: (s) => s.key || '(deciding)' },
  { head: 'session', field: 'session', cell: (s) => s.session ?? '-' },
  { head: 'mcp', field: 'protocol', cell: (s) => s.protocol ?? '-' },
  { head: 'attempts', field: 'attempts', cell: (s) => (s.running ? 'running' : attemptsText(s)) },
  { head: 'result', field: 'result', cell: (s) => (s.running ? '' : resultText(s)) },
];

/** A table of the job's steps (a live session's line above its calls), then each attempt's note. */
export function formatTrace(trace: ShownTrace): string {
  const calls = callsOf(trace);
  // One table for every call, so the columns line up; a live session's line goes above its calls.
  const [head, ...lines] = table(
    TRACE_COLUMNS.map((c) => c.head),
    calls.map((s) => TRACE_COLUMNS.map((c) => c.cell(s))),
  );
  const out = [`job ${trace.jobId}: ${trace.status} (${trace.calls} calls, run ${trace.run})`];
  if (trace.omitted > 0)
    out.push(`(${trace.omitted} earlier steps not shown${trace.earlier ? `: ${trace.earlier}` : ''})`);
  out.push(head);
  let next = 0;
  for (const step of trace.steps) {
    if (isSessionTrace(step)) out.push(sessionLine(step), ...lines.slice(next, (next += step.calls.length)));
    else out.push(lines[next++]);
  }
  const notes = calls.flatMap((s) => [
    ...(s.question ? [`  #${s.n} question: ${questionText(s.question)}`] : []),
    ...(s.waited ?? []).map((w) => `  #${s.n} waited ${waitText(w)}`),
    ...s.attempts.filter((a) => a.note).map((a) => `  #${s.n} attempt ${a.attempt} (${a.outcome}): ${a.note}`),
  ]);
  if (notes.length) out.push('', 'notes:', ...notes);
  return out.join('\n');
}

/** F2, F3: `4.2 s for its turn: acme's cap of 3 running calls (2nd in line)`, `3 times, 2.9 s for a slot: …`. */
function waitText(w: WaitTrace): string {
  const times = w.times > 1 ? `${w.times} times, ` : '';
  const seconds = `${(w.ms / 1000).toFixed(1)} s`;
  return `${times}${seconds} for ${w.for === 'turn' ? 'its turn' : 'a slot'}: ${w.why}`;
}

/** A call's step in SPEC "Trace JSON": `{ tool, key, session, result, attempts }` first, then every other field it has. */
function callJson(step: StepTrace) {
  const { tool, key, session, result, attempts, ...rest } = step;
  return { tool, key, session, result, attempts, ...rest };
}

/**
 * SPEC "Trace JSON" (`oz0 job trace --json`, `oz0 job start --wait --json`): `{ jobId, status, steps }` and every other
 * field of the trace, each step with every field it has — none picked by hand, so what the table shows
 * ({@link TRACE_COLUMNS}) is never dropped. A live session is a step of its own that holds its calls:
 * `{ session, kind, harness, status, runs, result, calls, omitted }`.
 */
export function traceJson(trace: ShownTrace) {
  const { jobId, status, steps, ...rest } = trace;
  return {
    jobId,
    status,
    ...rest,
    steps: steps.map((step) => (isSessionTrace(step) ? { ...step, calls: step.calls.map(callJson) } : callJson(step))),
  };
}

/** A tenant's policy as `oz0 policy show` prints it. */
export function formatPolicy(
  shown: TenantState & { tenant: string; policySources: Record<string, Source>; killsForAllTenants: string[] },
): string {
  const out = [`tenant ${shown.tenant} (policy version ${shown.version})`, 'policy:'];
  const patterns = Object.entries(shown.policy);
  out.push(
    ...(patterns.length
      ? patterns.map(
          ([p, d]) => `  ${p.padEnd(30)} ${d.padEnd(8)} ${SOURCE_WORDS[shown.policySources[p] ?? 'unknown']}`,
        )
      : ['  (defaults: plugin and sandboxed servers allow, remote servers ask)']),
  );
  out.push('kill switches:');
  const kills = [...shown.kills.map((k) => `  ${k}`), ...shown.killsForAllTenants.map((k) => `  ${k} (every tenant)`)];
  out.push(...(kills.length ? kills : ['  (none)']));
  out.push('approved listings:');
  const approvals = Object.entries(shown.approvals).map(
    ([server, a]) => `  ${server.padEnd(20)} ${a.digest} (${a.approvedAt})`,
  );
  out.push(...(approvals.length ? approvals : ['  (none)']));
  return out.join('\n');
}

/** The waiting calls as a table, oldest first, with the commands that answer them. */
export function formatWaiting(calls: readonly ListedCall[], unreachable: readonly string[], now = Date.now()): string {
  const out: string[] = [];
  if (calls.length === 0) out.push("no call waits for a person's yes");
  else {
    const args = (a: string) => (a.length > 60 ? `${a.slice(0, 57)}...` : a);
    const rows = calls.map((c) => [
      c.jobId,
      c.activityId,
      c.tool,
      c.tenant ?? '?',
      waitedInWords(c.waitedMs),
      waitedInWords(Date.parse(c.until) - now),
      args(c.args),
    ]);
    out.push(...table(['job', 'call', 'tool', 'tenant', 'waited', 'refused in', 'arguments'], rows));
    out.push('', 'answer with: oz0 call approve JOB CALL  ·  oz0 call deny JOB CALL --reason TEXT');
  }
  for (const jobId of unreachable) out.push(`(job ${jobId} waits, but did not answer: is a node up?)`);
  return out.join('\n');
}

/** F5: `oz0 tenant status`: one line a tenant, its limits and what is counted of its calls now. */
export function formatTenants(shown: readonly TenantShown[]): string {
  if (shown.length === 0) return 'no tenants: none in the config, and no policy workflow yet';
  const rows = shown.map((t) => {
    const own = t.limiter?.scopes.find((s) => s.scope === TENANT_SCOPE);
    return [
      t.tenant,
      String(t.shares.weight),
      `${t.shares.maxPriority}-5`,
      String(t.jobs),
      String(t.calls.running),
      String(t.calls.queued),
      t.limiter ? String(t.limiter.queue) : '-',
      capText(t.shares.limits.maxRunningCalls, own?.running),
      rateText(t.shares.limits.callsPerSecond),
    ];
  });
  const head = ['tenant', 'weight', 'priority', 'jobs', 'running', 'queued', 'in line', 'cap', 'rate'];
  const out = table(head, rows);
  for (const t of shown) {
    for (const [server, limit] of Object.entries(t.shares.limits.servers ?? {})) {
      const counted = t.limiter?.scopes.find((s) => s.scope === serverScope(server));
      out.push(
        `  ${t.tenant}'s calls of ${server}: cap ${capText(limit.maxRunningCalls, counted?.running)}, rate ` +
          `${rateText(limit.callsPerSecond)}${counted?.waiting ? `, ${counted.waiting} in line` : ''}`,
      );
    }
  }
  // N4: a limiter that is behind holds its tenant's calls back (they wait; none fails): said on a line of its own.
  for (const t of shown) if (t.limiterBehind) out.push(`  ${t.tenant}: ${t.limiterBehind}; its calls wait meanwhile`);
  // A13: where each of its shares came from, grouped: `beta: weight set by a command; priority, cap from the config`.
  for (const t of shown) {
    const by = new Map<Source, string[]>();
    for (const [field, source] of Object.entries(t.sources))
      by.set(source, [...(by.get(source) ?? []), shareName(field)]);
    out.push(
      `  ${t.tenant}: ${[...by].map(([source, fields]) => `${fields.join(', ')} ${SOURCE_WORDS[source]}`).join('; ')}`,
    );
  }
  const looked = shown.filter((t) => t.jobs > t.calls.jobsLooked);
  out.push(
    '',
    'running: calls started on a node; queued: scheduled, waiting in Temporal for a slot; in line: waiting for their ' +
      'turn under a cap or rate',
  );
  if (looked.length)
    out.push(
      `(running and queued count the calls of the first ${looked[0].calls.jobsLooked} running jobs of a tenant)`,
    );
  return out.join('\n');
}

/** A13: where a field came from, in a few words. */
const SOURCE_WORDS: Record<Source, string> = {
  set: 'set by a command',
  config: 'from the config',
  defaults: 'the defaults',
  unknown: 'from an older oz0, which did not record where from',
};

/** A share field as `oz0 tenant status` names it: `weight`, `priority`, `cap`, `rate`, `ledger's cap`. */
function shareName(field: string): string {
  const [, server, limit] = /^limits(?:\.servers\.([^.]+))?\.(\w+)$/.exec(field) ?? [];
  if (!limit) return field === 'maxPriority' ? 'priority' : field;
  return `${server ? `${server}'s ` : ''}${limit === 'maxRunningCalls' ? 'cap' : 'rate'}`;
}

/** `12 of 20`: a cap, and the permits its limiter counts held now; `-` for none. */
function capText(cap: number | undefined, running: number | undefined): string {
  if (cap === undefined) return '-';
  return running === undefined ? String(cap) : `${running} of ${cap}`;
}

function rateText(rate: number | undefined): string {
  return rate === undefined ? '-' : `${rate}/s`;
}
