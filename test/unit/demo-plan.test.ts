/**
 * `npm run demo` fails loudly (issue 32.2): what it expects of each step of its job, and the lines it prints for each
 * step that went otherwise — a job COMPLETED with failed calls is not a demo that worked.
 */
import { JobSpecSchema } from '../../model/schemas';
import { demoPlan, demoProblems, specOf } from '../../examples/demo-plan';
import type { DemoStep, Expected, ExpectedCall } from '../../examples/demo-plan';
import type { AttemptRecord } from '../../model/schemas';
import type { SessionTrace, StepTrace, TraceStep } from '../../model/job';

const ORDER = 'o-1';

/** A call's step that ended as `expected` says. */
function callStep(n: number, tool: string, expected: Expected, session: string | null = null): StepTrace {
  const attempt: AttemptRecord = { attempt: 1, outcome: expected };
  if (expected === 'cancelled') attempt.note = 'oz0: cancelled by its session: the harness closed the call’s stream';
  const text = expected === 'ok' ? `${tool} done` : `${tool} refused`;
  return {
    n,
    tool,
    key: `job/c${n}`,
    session,
    activityId: `c${n}`,
    result: { isError: expected !== 'ok', content: [{ type: 'text', text }] },
    attempts: [attempt],
  };
}

/** The trace of a job that went exactly as the plan says. */
function asPlanned(plan: DemoStep[]): TraceStep[] {
  let n = 0;
  let sessions = 0;
  const steps: TraceStep[] = [];
  for (const step of plan) {
    if (!('session' in step)) steps.push(callStep(++n, step.call, step.expect));
    else if (Array.isArray(step.session)) {
      const s = `s${++sessions}`;
      steps.push(...step.session.map((c: ExpectedCall) => callStep(++n, c.call, c.expect, s)));
    } else {
      const s = `s${++sessions}`;
      const calls = Object.entries(step.session.calls).map(([tool, expected]) => callStep(++n, tool, expected, s));
      const session: SessionTrace = {
        session: s,
        kind: 'harness',
        harness: step.session.harness,
        status: 'ended',
        runs: [{ run: 1, node: 'vm/1', ended: 'exited 0' }],
        result: { isError: false, content: [{ type: 'text', text: '{"action":"refunded 400"}' }] },
        calls,
        omitted: 0,
      };
      steps.push(session);
    }
  }
  return steps;
}

const plan = demoPlan(ORDER, true);
const good = () => asPlanned(plan);
const call = (steps: TraceStep[], tool: string, nth = 1): StepTrace => {
  const found = steps.flatMap((s) => ('runs' in s ? s.calls : [s])).filter((c) => c.tool === tool)[nth - 1];
  if (!found) throw new Error(`no call ${nth} of ${tool}`);
  return found;
};
const harness = (steps: TraceStep[], name: string) =>
  steps.find((s): s is SessionTrace => 'runs' in s && s.harness === name)!;

test('issue 32.2: the job spec is the plan without its expectations, and the SPEC’s schema takes it', () => {
  const spec = specOf('acme', plan);
  expect(JobSpecSchema.parse(spec)).toEqual(spec);
  expect(JSON.stringify(spec)).not.toContain('expect');
  expect(spec.steps.at(-1)).toEqual({ call: 'ledger.charge', args: { order_id: ORDER, amount: -1 } });
  // Without the project's venv, the Python agent and its order are left out.
  expect(specOf('acme', demoPlan(ORDER, false)).steps).toHaveLength(spec.steps.length - 2);
});

test('issue 32.2: a job that went as planned has no problem', () => {
  expect(demoProblems(plan, { status: 'COMPLETED', steps: good() })).toEqual([]);
});

test.each<[string, (steps: TraceStep[]) => unknown, string[]]>([
  [
    'a call it expects to answer failed every attempt (the job still COMPLETED)',
    (steps) => {
      const notes = call(steps, 'notes.echo');
      notes.attempts = [1, 2, 3].map((attempt) => ({
        attempt,
        outcome: 'failed' as const,
        note: 'the server was not reachable: could not start server "notes"',
      }));
      notes.result = { isError: true, content: [{ type: 'text', text: 'oz0: the call failed' }] };
    },
    ['step 4 notes.echo: expected ok, got failed: the server was not reachable: could not start server "notes"'],
  ],
  [
    'the charge the ledger should refuse went through',
    (steps) => {
      const charge = call(steps, 'ledger.charge', 3);
      charge.attempts = [{ attempt: 1, outcome: 'ok' }];
      charge.result = { isError: false, content: [{ type: 'text', text: 'charged -1 to o-1' }] };
    },
    ['step 23 ledger.charge: expected error, got ok: charged -1 to o-1'],
  ],
  [
    'an agent could not start: its own line, not one per call it never made',
    (steps) => {
      const s = harness(steps, 'refunds');
      s.runs = [{ run: 1, node: 'vm/1', ended: 'could not start' }];
      s.result = { isError: true, content: [{ type: 'text', text: 'oz0: the harness could not start: no bwrap' }] };
      s.calls = [];
    },
    [
      'session s2 (harness refunds): expected its agent to end with a result, got could not start: oz0: the harness could not start: no bwrap',
    ],
  ],
  [
    'an agent ended well but left a call out, and made another the demo does not expect',
    (steps) => {
      const s = harness(steps, 'refunds_py');
      s.calls = s.calls.filter((c) => c.tool !== 'reader.sleep');
      s.calls.push(callStep(99, 'ledger.charge', 'ok', 's3'));
    },
    [
      'step 99 ledger.charge in session s3 (harness refunds_py): a call the demo does not expect of its agent',
      'session s3 (harness refunds_py): expected a call of reader.sleep (cancelled), it made none',
    ],
  ],
  [
    'the agent’s slow check ran to its end instead of being cancelled at its deadline',
    (steps) => {
      const sleep = call(steps, 'reader.sleep');
      sleep.attempts = [{ attempt: 1, outcome: 'ok' }];
      sleep.result = { isError: false, content: [{ type: 'text', text: 'slept 30000 ms' }] };
    },
    ['step 16 reader.sleep in session s2 (harness refunds): expected cancelled, got ok: slept 30000 ms'],
  ],
  [
    'a call still running when the trace was read',
    (steps) => {
      const echo = call(steps, 'search.echo');
      echo.running = true;
      echo.attempts = [];
      echo.result = { isError: false, content: [] };
    },
    ['step 5 search.echo: expected ok, got running'],
  ],
])('issue 32.2: %s', (_what, spoil, expected) => {
  const steps = good();
  spoil(steps);
  expect(demoProblems(plan, { status: 'COMPLETED', steps })).toEqual(expected);
});

test('issue 32.2: a job that failed half-way says so, and names the steps it never got to', () => {
  const steps = good().slice(0, 3);
  const problems = demoProblems(plan, { status: 'FAILED', steps });
  expect(problems[0]).toBe('the job ended FAILED, not COMPLETED');
  expect(problems[1]).toBe('notes.echo: expected a call of it here, the job has no more steps');
  expect(problems).toContain('harness refunds: expected its session here, the job has no more steps');
});

test('issue 32.2: steps out of place are named with what the job has there', () => {
  const steps = good();
  [steps[2], steps[3]] = [steps[3], steps[2]];
  expect(demoProblems(plan, { status: 'COMPLETED', steps })).toEqual([
    'reader.read_pages: expected a call of it here, the job has step 4 notes.echo',
    'notes.echo: expected a call of it here, the job has step 3 reader.read_pages',
  ]);
});
