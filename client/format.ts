/** Human-readable output of the CLI: a job's trace as a table. */
import type { StepTrace } from '../workflows/definitions';
import type { ShownTrace } from './jobs';
import type { TenantState } from '../common/schemas';

function resultText(step: StepTrace): string {
  const texts = step.result.content
    .map((c) =>
      c && typeof c === 'object' && (c as { type?: string }).type === 'text'
        ? (c as { text: string }).text
        : `[${(c as { type?: string })?.type ?? 'content'}]`,
    )
    .join(' ');
  const flat = texts.replace(/\s+/g, ' ').trim();
  return `${step.result.isError ? 'ERROR ' : ''}${flat.length > 80 ? `${flat.slice(0, 77)}...` : flat}`;
}

function attemptsText(step: StepTrace): string {
  return step.attempts.map((a) => `${a.attempt}:${a.outcome}`).join(' ') || '-';
}

/** A table of the job's steps, then each attempt's note where there is one. */
export function formatTrace(trace: ShownTrace): string {
  const rows = trace.steps.map((s) => [String(s.n), s.tool, s.key, s.session ?? '-', attemptsText(s), resultText(s)]);
  const header = ['#', 'tool', 'key', 'session', 'attempts', 'result'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]))).join('  ');
  const out = [`job ${trace.jobId}: ${trace.status} (${trace.calls} calls, run ${trace.run})`];
  if (trace.omitted > 0) out.push(`(${trace.omitted} earlier steps not shown)`);
  out.push(line(header), ...rows.map(line));
  const notes = trace.steps.flatMap((s) =>
    s.attempts.filter((a) => a.note).map((a) => `  #${s.n} attempt ${a.attempt} (${a.outcome}): ${a.note}`),
  );
  if (notes.length) out.push('', 'notes:', ...notes);
  return out.join('\n');
}

/** A tenant's policy as `oz0 policy show` prints it. */
export function formatPolicy(shown: TenantState & { tenant: string; killsForAllTenants: string[] }): string {
  const out = [`tenant ${shown.tenant} (policy version ${shown.version})`, 'policy:'];
  const patterns = Object.entries(shown.policy);
  out.push(
    ...(patterns.length
      ? patterns.map(([p, d]) => `  ${p.padEnd(30)} ${d}`)
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
