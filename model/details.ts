/**
 * What a job says of itself in the Temporal UI and CLI (T3), beyond its search attributes: a one-line summary and
 * the details of its spec, set by the client when it starts the job (Temporal's static summary and details), and
 * the job's current details, which the workflow keeps up to date (`setCurrentDetails`): its status, the calls running
 * now and its live sessions. Pure, in Temporal's markdown: the client and the workflow both render with it.
 */
import type { JobSpec } from './schemas';
import { isSessionTrace, scriptedCalls, toolsOf } from './job';
import type { JobStatus, SessionTrace, TraceStep } from './job';
import type { WaitingCall } from './messages';

/** A summary longer than this is cut: the UI shows it on one line. */
export const SUMMARY_MAX = 120;
/** Steps the details list one by one; the rest are counted. */
const DETAILS_STEPS = 20;
/** Running calls the current details list one by one (a harness may run many at once); the rest are counted. */
const DETAILS_CALLS = 10;

function cut(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}

function plural(n: number, word: string): string {
  return `${n} ${word}${n === 1 ? '' : 's'}`;
}

/** `acme · 5 steps · ledger.charge, reader.read_pages +2`: who, how much, and which tools, on one line. */
export function jobSummary(spec: JobSpec): string {
  const tools = toolsOf(spec);
  const live = spec.steps.filter((s) => 'session' in s && !scriptedCalls(s)).length;
  const parts = [spec.tenant, plural(spec.steps.length, 'step')];
  if (live) parts.push(plural(live, 'live session'));
  const head = parts.join(' · ');
  if (!tools.length) return cut(head, SUMMARY_MAX);
  // As many tools as fit, then how many more.
  let shown = tools.length;
  const line = (n: number) =>
    `${head} · ${tools.slice(0, n).join(', ')}${n < tools.length ? ` +${tools.length - n}` : ''}`;
  while (shown > 1 && line(shown).length > SUMMARY_MAX) shown--;
  return cut(line(shown), SUMMARY_MAX);
}

/**
 * A call's activity summary, for the history's column (about 45 characters of it show): its tool, then its key
 * without the job id in front (the page is the job's own) and with its digest cut to 8 digits, e.g.
 * `ledger.set_status · …/s1/set_status#6661f6d2…/1`. The whole key is in the activity's input and heartbeat.
 */
export function callSummary(tool: string, key: string, jobId: string): string {
  const own = key.startsWith(`${jobId}/`) ? `…/${key.slice(jobId.length + 1)}` : key;
  return cut(`${tool} · ${own.replace(/#([0-9a-f]{8})[0-9a-f]{24}\//, '#$1…/')}`, SUMMARY_MAX);
}

/** One line per step: a call, a scripted session and its calls, a harness, an external client. */
function stepLine(step: JobSpec['steps'][number]): string {
  if ('call' in step) return `call \`${step.call}\``;
  const calls = scriptedCalls(step);
  if (calls) {
    const counted = new Map<string, number>();
    for (const c of calls) counted.set(c.call, (counted.get(c.call) ?? 0) + 1);
    const tools = [...counted].map(([tool, n]) => `\`${tool}\`${n > 1 ? ` ×${n}` : ''}`).join(', ');
    return `session of ${plural(calls.length, 'call')}: ${tools}`;
  }
  return 'harness' in step.session
    ? `live session: harness \`${step.session.harness}\``
    : 'live session: an external client (H9)';
}

/** The spec in a few lines: tenant, its steps in order, the tools it names. */
export function jobDetails(spec: JobSpec): string {
  const lines = [`Tenant \`${spec.tenant}\`, ${plural(spec.steps.length, 'step')}.`, ''];
  spec.steps.slice(0, DETAILS_STEPS).forEach((step, i) => lines.push(`${i + 1}. ${stepLine(step)}`));
  if (spec.steps.length > DETAILS_STEPS) lines.push(`- … and ${spec.steps.length - DETAILS_STEPS} more steps`);
  const tools = toolsOf(spec);
  if (tools.length) lines.push('', `Tools: ${tools.map((t) => `\`${t}\``).join(', ')}`);
  return lines.join('\n');
}

/** A call running now, as the workflow knows it: its progress and attempt live in its activity's heartbeat. */
export interface RunningCall {
  activityId: string;
  tool: string;
  key: string;
  session: string | null;
  sessionRun?: number;
}

export interface JobState {
  jobId: string;
  status: JobStatus;
  /** m in K2. */
  run: number;
  /** Calls made so far in the whole job. */
  calls: number;
  /** The step running now (0-based) among this run's, and how many this run has. */
  step: number;
  steps: number;
  /** This run's spec as {@link jobSummary} says it: computed once per run, since a spec may be long. */
  summary: string;
  running: Iterable<RunningCall>;
  /** A4: the calls that wait for a person's yes, oldest first. */
  waiting: readonly WaitingCall[];
  /** The trace's steps: live sessions are found among them. */
  trace: readonly TraceStep[];
}

function sessionLine(s: SessionTrace): string {
  const what = s.kind === 'harness' ? `harness \`${s.harness}\`` : 'an external client';
  const run = s.runs.at(-1);
  const where = run ? `, run ${run.run}${run.node ? ` on \`${run.node}\`` : ''}` : '';
  return `Session ${s.session} (${what}): ${s.status}${where}, ${plural(s.calls.length, 'call')} so far.`;
}

/**
 * The job's current details: what it is doing now. The workflow knows which calls run, their tools and keys; each
 * call's attempt and progress are in its pending activity (the heartbeat), which the UI shows beside these lines.
 */
export function currentDetails(state: JobState): string {
  const lines = [
    `**${state.status}** · run ${state.run}, step ${Math.min(state.step + 1, state.steps)} of ${state.steps} · ${plural(state.calls, 'call')} made so far`,
    '',
    state.summary,
  ];
  const running = [...state.running];
  if (running.length) {
    lines.push('', 'Running now (attempt and progress: its pending activity):');
    for (const c of running.slice(0, DETAILS_CALLS)) {
      const where = c.session ? ` in ${c.session}${c.sessionRun ? ` run ${c.sessionRun}` : ''}` : '';
      lines.push(`- \`${c.tool}\` · activity \`${c.activityId}\`${where} · key \`${c.key}\``);
    }
    if (running.length > DETAILS_CALLS) lines.push(`- … and ${running.length - DETAILS_CALLS} more`);
  }
  if (state.waiting.length) {
    lines.push('', `Waiting for a person's yes (\`oz0 call approve ${state.jobId} CALL\` or \`oz0 call deny …\`):`);
    for (const w of state.waiting.slice(0, DETAILS_CALLS)) {
      const where = w.session ? ` in ${w.session}${w.sessionRun ? ` run ${w.sessionRun}` : ''}` : '';
      lines.push(
        `- \`${w.tool}\` · call \`${w.activityId}\`${where} · key \`${w.key}\` · asked ${w.askedAt}, refused unanswered at ${w.until}`,
        `  arguments: \`${w.args.replace(/`/g, "'")}\``,
      );
    }
    if (state.waiting.length > DETAILS_CALLS) lines.push(`- … and ${state.waiting.length - DETAILS_CALLS} more`);
  }
  const live = state.trace.filter(isSessionTrace).filter((s) => s.status !== 'ended');
  if (live.length) lines.push('', ...live.map(sessionLine));
  return lines.join('\n');
}
