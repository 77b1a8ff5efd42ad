/**
 * What `npm run demo`'s job does and what it expects of each step (issue 32.2), and the check that says, step by step,
 * what went otherwise. A job completes with failed calls by design — an error result is an answer the job reads, not
 * a failure of the job — so the demo's exit code comes from these expectations, not from the job's status alone.
 */
import type { CallStep, JobSpec } from '../model/schemas';
import { contentText } from '../common/text';
import { isSessionTrace } from '../model/job';
import type { JobTrace, SessionTrace, StepTrace, ToolResult } from '../model/job';

/**
 * How a call should end, by its last attempt's outcome: `ok`, an answer; `error`, the server's own error result;
 * `cancelled`, stopped by the session that made it.
 */
export type Expected = 'ok' | 'error' | 'cancelled';

/** A call of the job and how it should end. */
export type ExpectedCall = CallStep & { expect: Expected };

/** A harness session and the calls its agent should make, one each, by tool (in whatever order it makes them). */
export interface ExpectedHarness {
  harness: string;
  input: Record<string, unknown>;
  calls: Record<string, Expected>;
}

export type DemoStep = ExpectedCall | { session: ExpectedCall[] } | { session: ExpectedHarness };

/** The demo's job for the order `order`; with `python`, the same agent in Python refunds an order of its own too. */
export function demoPlan(order: string, python: boolean): DemoStep[] {
  // The refunds agent (examples/agents/refunds.*) looks the order up, refunds what was charged and not yet refunded
  // (its refund waits for a person's yes too), then at once sets the status, writes to the audit log, and cancels its
  // own slow check when its deadline (1 s) passes.
  const agentCalls: Record<string, Expected> = {
    'ledger.lookup_order': 'ok',
    'ledger.refund': 'ok',
    'ledger.set_status': 'ok',
    'reader.echo': 'ok',
    'reader.sleep': 'cancelled',
  };
  const status = (s: string): ExpectedCall => ({
    call: 'ledger.set_status',
    args: { id: order, status: s },
    expect: 'ok',
  });
  return [
    { call: 'ledger.charge', args: { order_id: order, amount: 500 }, expect: 'ok' },
    // Waits for a person's yes (the demo gives it).
    { call: 'ledger.refund', args: { order_id: order, amount: 100 }, expect: 'ok' },
    { call: 'reader.read_pages', args: { pages: 3, page_ms: 150 }, expect: 'ok' },
    { call: 'notes.echo', args: { text: 'from a sandboxed server of this job' }, expect: 'ok' },
    { call: 'search.echo', args: { text: 'from a remote server over Streamable HTTP' }, expect: 'ok' },
    // D1: a screenshot of a page, as a browser tool answers it: a PNG of 1280 × 800, about 2.9 MiB.
    { call: 'pages.screenshot', args: { width: 1280, height: 800 }, expect: 'ok' },
    // A remote server on each tenant's own OAuth client (R1-R2): the desk answers who it takes the caller for.
    ...ticketsPlan(order),
    { session: [status('open'), status('closed'), status('open')] },
    // It finds 400 of the order not refunded yet; it runs in a sandbox of its own (I1), reaching only its gateway.
    { session: { harness: 'refunds', input: { order_id: order, deadline_ms: 1000 }, calls: agentCalls } },
    // The same agent in Python, on the MCP Python SDK, when the project's venv is there: an order of its own.
    ...(python
      ? [
          { call: 'ledger.charge', args: { order_id: `${order}-py`, amount: 300 }, expect: 'ok' as const },
          {
            session: {
              harness: 'refunds_py',
              input: { order_id: `${order}-py`, deadline_ms: 1000 },
              calls: agentCalls,
            },
          },
        ]
      : []),
    // A charge the ledger refuses (a negative amount): its error result is what the demo expects.
    { call: 'ledger.charge', args: { order_id: order, amount: -1 }, expect: 'error' },
  ];
}

/**
 * The ticket desk's calls of one tenant: who the desk takes it for (its own OAuth client, read on the server's side),
 * then a ticket opened with a token that has the write scope (a step-up when the first token had only read).
 */
export function ticketsPlan(order: string): ExpectedCall[] {
  return [
    { call: 'tickets.whoami', args: {}, expect: 'ok' },
    { call: 'tickets.open_ticket', args: { title: `refund of ${order}` }, expect: 'ok' },
  ];
}

/** The job spec of a plan: its steps without what the demo expects of them. */
export function specOf(tenant: string, plan: DemoStep[]): JobSpec {
  const call = ({ expect: _expected, ...step }: ExpectedCall): CallStep => step;
  return {
    tenant,
    steps: plan.map((step) => {
      if (!('session' in step)) return call(step);
      if (Array.isArray(step.session)) return { session: step.session.map(call) };
      const { harness, input } = step.session;
      return { session: { harness, input } };
    }),
  };
}

/**
 * What went otherwise than the plan says, one line per step (empty when all went as expected): the step's number and
 * tool, what was expected, what happened and why — `step 4 notes.echo: expected ok, got failed: <its note>`.
 */
export function demoProblems(plan: DemoStep[], trace: Pick<JobTrace, 'steps'> & { status: string }): string[] {
  const problems: string[] = [];
  if (trace.status !== 'COMPLETED') problems.push(`the job ended ${trace.status}, not COMPLETED`);
  // A scripted session's calls are steps of the trace, each in its place.
  const planned = plan.flatMap(
    (p): Array<ExpectedCall | { session: ExpectedHarness }> =>
      !('session' in p) ? [p] : Array.isArray(p.session) ? p.session : [{ session: p.session }],
  );
  for (const [i, want] of planned.entries()) {
    const got = trace.steps[i];
    if ('call' in want) {
      if (!got || isSessionTrace(got) || got.tool !== want.call) {
        problems.push(`${want.call}: expected a call of it here, the job has ${got ? stepName(got) : 'no more steps'}`);
      } else {
        const problem = callProblem(got, want.expect);
        if (problem) problems.push(problem);
      }
    } else if (!got || !isSessionTrace(got) || got.harness !== want.session.harness) {
      const what = got ? stepName(got) : 'no more steps';
      problems.push(`harness ${want.session.harness}: expected its session here, the job has ${what}`);
    } else {
      problems.push(...sessionProblems(got, want.session));
    }
  }
  return problems;
}

function stepName(step: StepTrace | SessionTrace): string {
  if (!isSessionTrace(step)) return `step ${step.n} ${step.tool}`;
  return `session ${step.session} (${step.harness ? `harness ${step.harness}` : 'an external client'})`;
}

/** A result as a person reads it on one line: its text, cut at 500 characters. */
function resultLine(result: ToolResult | undefined): string {
  const text = contentText(result?.content).replace(/\s+/g, ' ').trim();
  return text.length > 500 ? `${text.slice(0, 497)}...` : text;
}

/** What is wrong with a call's end, if anything: `step 4 notes.echo: expected ok, got failed: <why>`. */
function callProblem(step: StepTrace, expected: Expected, where = ''): string | undefined {
  const last = step.attempts.at(-1);
  const outcome = step.running ? 'running' : (last?.outcome ?? 'no attempt');
  const answered = outcome === 'ok' ? !step.result.isError : outcome === 'error' ? step.result.isError : true;
  if (outcome === expected && answered) return undefined;
  const why = last?.note ?? resultLine(step.result);
  return `${stepName(step)}${where}: expected ${expected}, got ${outcome}${why ? `: ${why}` : ''}`;
}

/** What went otherwise in a harness session: the session's own end, each call, and the calls it should have made. */
function sessionProblems(session: SessionTrace, want: ExpectedHarness): string[] {
  const problems: string[] = [];
  const name = stepName(session);
  const failed = session.status !== 'ended' || !session.result || session.result.isError;
  if (failed) {
    const ended = session.runs.at(-1)?.ended;
    const why = resultLine(session.result) || ended || session.status;
    problems.push(`${name}: expected its agent to end with a result, got ${ended ? `${ended}: ` : ''}${why}`);
  }
  const made = new Set<string>();
  for (const call of session.calls) {
    const expected = want.calls[call.tool];
    if (!expected || made.has(call.tool)) {
      problems.push(`${stepName(call)} in ${name}: a call the demo does not expect of its agent`);
      continue;
    }
    made.add(call.tool);
    const problem = callProblem(call, expected, ` in ${name}`);
    if (problem) problems.push(problem);
  }
  // An agent that failed has said why; the calls it did not get to make follow from it.
  if (!failed) {
    for (const [tool, expected] of Object.entries(want.calls)) {
      if (!made.has(tool)) problems.push(`${name}: expected a call of ${tool} (${expected}), it made none`);
    }
  }
  return problems;
}
