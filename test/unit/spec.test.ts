import { formatPath, JobSpecError, parseJobSpec, toolsOf } from '../../workflows/definitions';
import type { JobSpec } from '../../workflows/definitions';

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

  test.each<[string, unknown, string]>([
    ['a tool without a dot', spec((s) => (s.steps[0] = { call: 'ledger' })), 'steps[0].call'],
    ['a tool with no server', spec((s) => (s.steps[0] = { call: '.charge' })), 'steps[0].call'],
    ['a tool with no function', spec((s) => (s.steps[0] = { call: 'ledger.' })), 'steps[0].call'],
    ['a tool with a space', spec((s) => (s.steps[0] = { call: 'led ger.charge' })), 'steps[0].call'],
    [
      'a session tool without a dot',
      spec((s) => (s.steps[1] = { session: [{ call: 'a.b' }, { call: 'set_status' }] })),
      'steps[1].session[1].call',
    ],
    ['no tenant', spec((s) => delete s.tenant), 'tenant'],
    ['an empty tenant', spec((s) => (s.tenant = '')), 'tenant'],
    ['a tenant with a space', spec((s) => (s.tenant = 'ac me')), 'tenant'],
    ['a tenant of 65 characters', spec((s) => (s.tenant = 'a'.repeat(65))), 'tenant'],
    ['empty steps', spec((s) => (s.steps = [])), 'steps'],
    ['steps that are no array', spec((s) => (s.steps = { call: 'a.b' })), 'steps'],
    ['an empty session', spec((s) => (s.steps[1] = { session: [] })), 'steps[1].session'],
    ['an unknown key on a call', spec((s) => (s.steps[0] = { call: 'a.b', retries: 3 })), 'steps[0]'],
    ['a step that is neither', spec((s) => (s.steps[0] = { args: {} })), 'steps[0]'],
    ['a step that is both', spec((s) => (s.steps[0] = { call: 'a.b', session: [{ call: 'a.b' }] })), 'steps[0]'],
  ])('Job spec: %s is a JobSpecError naming %s', (_what, input, field) => {
    const err = specError(() => parseJobSpec(input));
    expect(err.message).toMatch(/^bad job spec: /);
    expect(err.message).toContain(`: ${field}: `);
    expect(err.issues.map((i) => i.path)).toContain(field);
    expect(err.name).toBe('JobSpecError');
  });

  test('Job spec: an unknown top-level key is refused, naming the key', () => {
    const err = specError(() => parseJobSpec(spec((s) => (s.priority = 'high'))));
    expect(err.message).toContain('"priority"');
    expect(err.issues).toEqual([{ path: '(the spec itself)', message: expect.stringContaining('priority') }]);
  });

  test('Job spec: an unknown key on a call is named', () => {
    expect(specError(() => parseJobSpec(spec((s) => (s.steps[0] = { call: 'a.b', retries: 3 })))).message).toContain(
      '"retries"',
    );
  });

  test('Job spec: the error names every bad field', () => {
    const err = specError(() => parseJobSpec({ tenant: '', steps: [{ call: 'nodot' }, { session: [] }] }));
    expect(err.issues.map((i) => i.path)).toEqual(['tenant', 'steps[0].call', 'steps[1].session']);
  });

  test.each<[string, unknown]>([
    ['null', null],
    ['an array', []],
    ['a string', 'acme'],
  ])('Job spec: %s is not a spec', (_what, input) => {
    expect(specError(() => parseJobSpec(input)).issues[0].path).toBe('(the spec itself)');
  });

  // Bug: StepSchema is a plain z.union of the call and session shapes. When a field has the wrong type, neither
  // branch matches and zod reports one issue at the step with the union's message, so the field that is wrong is
  // never named (SPEC "Bad input": the error names the field). What it says instead, for each input:
  //   steps[0] = { call: 5 }                                     -> "steps[0]: a step is either …"
  //   steps[0] = { call: 'ledger.charge', args: 'o-1' }          -> "steps[0]: a step is either …"
  //   steps[0] = { call: 'ledger.charge', args: null }           -> "steps[0]: a step is either …"
  //   steps[1] = { session: [{ call: 'a.b', args: [1, 2] }] }    -> "steps[1]: a step is either …"
  //   steps[1] = { session: 'ledger.set_status' }                -> "steps[1]: a step is either …"
  test.failing.each<[string, unknown, string]>([
    ['a call that is no string', spec((s) => (s.steps[0] = { call: 5 })), 'steps[0].call'],
    ['args that are a string', spec((s) => (s.steps[0] = { call: 'ledger.charge', args: 'o-1' })), 'steps[0].args'],
    ['args that are null', spec((s) => (s.steps[0] = { call: 'ledger.charge', args: null })), 'steps[0].args'],
    [
      'session args that are an array',
      spec((s) => (s.steps[1] = { session: [{ call: 'a.b', args: [1, 2] }] })),
      'steps[1].session[0].args',
    ],
    ['a session that is no array', spec((s) => (s.steps[1] = { session: 'ledger.set_status' })), 'steps[1].session'],
  ])('Job spec: %s is a JobSpecError naming %s', (_what, input, field) => {
    expect(specError(() => parseJobSpec(input)).message).toContain(`: ${field}: `);
  });
});

describe('Job spec: toolsOf', () => {
  test('T3: the SPEC example uses ledger.charge then ledger.set_status', () => {
    expect(toolsOf(parseJobSpec(SPEC_EXAMPLE))).toEqual(['ledger.charge', 'ledger.set_status']);
  });

  test('T3: tools are listed once each, in first-use order across calls and sessions', () => {
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
    [[], '(the spec itself)'],
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
