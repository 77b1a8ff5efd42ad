import { toolsOf } from '../../model/job';
import { formatPath, JobIdSchema, JobSpecError, parseJobSpec, reservedIdProblem } from '../../model/schemas';
import type { JobSpec } from '../../model/schemas';

/** The example job spec of SPEC "Job spec", as written there. */
const SPEC_EXAMPLE = {
  tenant: 'acme',
  steps: [
    { call: 'ledger.charge', args: { order_id: 'o-1', amount: 500 } },
    {
      session: [
        { call: 'ledger.set_status', args: { id: 't-1', status: 'open' } },
        { call: 'ledger.set_status', args: { id: 't-1', status: 'closed' } },
      ],
    },
  ],
};

/** Runs `fn` and returns the JobSpecError it throws. */
function specError(fn: () => unknown): JobSpecError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(JobSpecError);
    return err as JobSpecError;
  }
  throw new Error('expected a JobSpecError, got none');
}

/** The example with `patch` applied to a deep copy. */
function spec(patch: (s: Record<string, unknown> & { steps: unknown[] }) => void): unknown {
  const copy = structuredClone(SPEC_EXAMPLE) as Record<string, unknown> & { steps: unknown[] };
  patch(copy);
  return copy;
}

describe('Job spec: parseJobSpec', () => {
  test('Job spec: the SPEC example parses to itself', () => {
    expect(parseJobSpec(SPEC_EXAMPLE)).toEqual(SPEC_EXAMPLE);
  });

  test.each<[string, unknown]>([
    ['a call without args', { tenant: 'acme', steps: [{ call: 'ledger.ping' }] }],
    ['a function name with dots and colons', { tenant: 'a.b-c_1', steps: [{ call: 'srv.ns.fn:v2/x-y' }] }],
    ['args with any JSON values', { tenant: 'acme', steps: [{ call: 'a.b', args: { x: [1, null, { y: 'z' }] } }] }],
  ])('Job spec: %s is accepted', (_what, input) => {
    expect(parseJobSpec(input)).toEqual(input);
  });

  test.each<[string, string, unknown]>([
    ['a tool without a dot', 'steps[0].call', spec((s) => (s.steps[0] = { call: 'ledger' }))],
    ['a tool with no server', 'steps[0].call', spec((s) => (s.steps[0] = { call: '.charge' }))],
    ['a tool with no function', 'steps[0].call', spec((s) => (s.steps[0] = { call: 'ledger.' }))],
    ['a tool with a space', 'steps[0].call', spec((s) => (s.steps[0] = { call: 'led ger.charge' }))],
    ['a call that is no string', 'steps[0].call', spec((s) => (s.steps[0] = { call: 5 }))],
    ['a step without call or session', 'steps[0].call', spec((s) => (s.steps[0] = { args: {} }))],
    ['args that are a string', 'steps[0].args', spec((s) => (s.steps[0] = { call: 'ledger.charge', args: 'o-1' }))],
    ['args that are null', 'steps[0].args', spec((s) => (s.steps[0] = { call: 'ledger.charge', args: null }))],
    ['an unknown key on a call', 'steps[0]', spec((s) => (s.steps[0] = { call: 'a.b', retries: 3 }))],
    [
      'a step with both call and session',
      'steps[0]',
      spec((s) => (s.steps[0] = { call: 'a.b', session: [{ call: 'a.b' }] })),
    ],
    ['a step that is no object', 'steps[0]', spec((s) => (s.steps[0] = 'ledger.charge'))],
    ['a step that is null', 'steps[0]', spec((s) => (s.steps[0] = null))],
    [
      'a session tool without a dot',
      'steps[1].session[1].call',
      spec((s) => (s.steps[1] = { session: [{ call: 'a.b' }, { call: 'set_status' }] })),
    ],
    [
      'session args that are an array',
      'steps[1].session[0].args',
      spec((s) => (s.steps[1] = { session: [{ call: 'a.b', args: [1, 2] }] })),
    ],
    [
      'an unknown key on a call in a session',
      'steps[1].session[0]',
      spec((s) => (s.steps[1] = { session: [{ call: 'a.b', wait: 1 }] })),
    ],
    ['an empty session', 'steps[1].session', spec((s) => (s.steps[1] = { session: [] }))],
    ['a session that is no array', 'steps[1].session', spec((s) => (s.steps[1] = { session: 'ledger.set_status' }))],
    ['no tenant', 'tenant', spec((s) => delete s.tenant)],
    ['an empty tenant', 'tenant', spec((s) => (s.tenant = ''))],
    ['a tenant with a space', 'tenant', spec((s) => (s.tenant = 'ac me'))],
    ['a tenant of 65 characters', 'tenant', spec((s) => (s.tenant = 'a'.repeat(65)))],
    ['empty steps', 'steps', spec((s) => (s.steps = []))],
    ['steps that are no array', 'steps', spec((s) => Object.assign(s, { steps: { call: 'a.b' } }))],
  ])('Bad input: %s is a JobSpecError naming %s', (_what, field, input) => {
    const err = specError(() => parseJobSpec(input));
    expect(err.message).toMatch(/^bad job spec: /);
    expect(err.message).toContain(`${field}: `);
    expect(err.issues.map((i) => i.path)).toContain(field);
    expect(err.name).toBe('JobSpecError');
  });

  test('Bad input: an unknown top-level key is refused, naming the key', () => {
    const err = specError(() => parseJobSpec(spec((s) => (s.urgency = 'high'))));
    expect(err.message).toContain('"urgency"');
    expect(err.issues).toEqual([{ path: '(top level)', message: expect.stringContaining('urgency') }]);
  });

  test('Bad input: an unknown key on a call is named', () => {
    expect(specError(() => parseJobSpec(spec((s) => (s.steps[0] = { call: 'a.b', retries: 3 })))).message).toContain(
      '"retries"',
    );
  });

  test('Bad input: the error names every bad field', () => {
    const err = specError(() => parseJobSpec({ tenant: '', steps: [{ call: 'nodot' }, { session: [] }] }));
    expect(err.issues.map((i) => i.path)).toEqual(['tenant', 'steps[0].call', 'steps[1].session']);
  });

  test.each<[string, unknown]>([
    ['null', null],
    ['an array', []],
    ['a string', 'acme'],
  ])('Bad input: %s is not a spec', (_what, input) => {
    expect(specError(() => parseJobSpec(input)).issues[0].path).toBe('(top level)');
  });
});

describe('Job spec: toolsOf', () => {
  test('the SPEC example uses ledger.charge then ledger.set_status (what Oz0Tools, T3, is set from)', () => {
    expect(toolsOf(parseJobSpec(SPEC_EXAMPLE))).toEqual(['ledger.charge', 'ledger.set_status']);
  });

  test('tools are listed once each, in first-use order across calls and sessions', () => {
    const job: JobSpec = {
      tenant: 'acme',
      steps: [
        { session: [{ call: 'files.write' }, { call: 'ledger.set_status' }] },
        { call: 'search.query' },
        { call: 'files.write' },
        { session: [{ call: 'ledger.charge' }, { call: 'search.query' }, { call: 'files.read' }] },
        { call: 'ledger.charge' },
      ],
    };
    expect(toolsOf(job)).toEqual(['files.write', 'ledger.set_status', 'search.query', 'ledger.charge', 'files.read']);
  });
});

describe('Job spec: formatPath', () => {
  test.each<[PropertyKey[], string]>([
    [[], '(top level)'],
    [['tenant'], 'tenant'],
    [['steps', 0, 'call'], 'steps[0].call'],
    [['steps', 1, 'session', 0, 'args'], 'steps[1].session[0].args'],
    [['steps', 2], 'steps[2]'],
    [['tools', 'ledger.charge', 'timeoutSeconds'], 'tools.ledger.charge.timeoutSeconds'],
    [[0, 'x'], '[0].x'],
  ])('Bad input: formatPath(%j) is %p', (parts, text) => {
    expect(formatPath(parts)).toBe(text);
  });
});

test.each([
  ['oz0-policy/acme', true],
  ['oz0-shares/acme', true],
  ['oz0-probe/oz0/node/n1/0-ab12', true],
  ['OZ0-Policy/acme', true],
  ['oz0-anything/else', true],
  ['oz0-policy', false],
  ['oz0-policy-like/x', false],
  ['my-oz0-policy/x', false],
  ['job-20261206-abc', false],
  ['orders/o-1', false],
])('I11: the job id %s is the platform’s: %s', (id, reserved) => {
  expect(Boolean(reservedIdProblem(id))).toBe(reserved);
  const parsed = JobIdSchema.safeParse(id);
  expect(parsed.success).toBe(!reserved);
  if (!parsed.success)
    expect(parsed.error.issues[0].message).toBe(
      `${id} is the platform's: ids that start oz0-<word>/ are its tenants' policies, limiters and probes`,
    );
});
