/**
 * SPEC "Trace JSON" (issue 32.8): `oz0 job trace --json` says what the table says. Every field a call's step has
 * reaches the JSON, and every column of the table shows a field the JSON has, with the same value.
 */
import { TRACE_COLUMNS, formatTrace, traceJson } from '../../client/format';
import type { ShownTrace } from '../../client/jobs';
import type { SessionTrace, StepTrace } from '../../model/job';

/**
 * A step with every field StepTrace has: `Required` makes this file fail to compile when a field is added to the
 * type and not here, so the tests below see every field there is.
 */
const full: Required<StepTrace> = {
  n: 3,
  tool: 'ledger.refund',
  key: 'job-1/s1/refund#0123/1',
  session: 's1',
  activityId: 'c3',
  result: { isError: false, content: [{ type: 'text', text: 'refunded 100' }], structuredContent: { ok: true } },
  attempts: [
    { attempt: 1, outcome: 'busy', note: 'busy: the server asked to wait 1 s' },
    { attempt: 2, outcome: 'ok', progress: { progress: 2, total: 4 } },
  ],
  node: 'vm/42',
  protocol: '2025-11-25',
  sessionRun: 2,
  running: true,
  question: { askedAt: '2026-12-04T13:10:43.586Z', pattern: 'ledger.refund', answer: undefined, ended: undefined },
  waited: [{ for: 'turn', why: "acme's cap of 3 running calls (2nd in line)", ms: 4210, times: 1 }],
};
const { running: _running, ...ended } = full;
const plain: StepTrace = { ...ended, n: 1, session: null, key: 'job-1/c1', activityId: 'c1' };
const live: SessionTrace = {
  session: 's1',
  kind: 'harness',
  harness: 'refunds',
  status: 'ended',
  runs: [{ run: 1, node: 'vm/42', ended: 'exited 0' }],
  calls: [ended],
  omitted: 0,
};
const trace: ShownTrace = { jobId: 'job-1', status: 'COMPLETED', run: 0, calls: 2, omitted: 0, steps: [plain, live] };

test('issue 32.8: every field of a call step reaches the trace JSON, the SPEC’s five first; every field of the trace too', () => {
  const json = traceJson({ ...trace, steps: [full] });
  expect(json.steps[0]).toEqual(full);
  expect(Object.keys(json.steps[0]).slice(0, 5)).toEqual(['tool', 'key', 'session', 'result', 'attempts']);
  expect(Object.keys(json).slice(0, 2)).toEqual(['jobId', 'status']);
  expect(json).toEqual({ ...trace, steps: [full] });
});

test('issue 32.8: a live session keeps every field of its own and of each of its calls', () => {
  const json = traceJson(trace);
  expect(json.steps).toEqual([plain, live]);
  expect(callsOfJson(json)).toHaveLength(2);
});

/** A call step that differs from `plain` in every field the table shows. */
const other: StepTrace = {
  ...plain,
  n: 9,
  tool: 'reader.echo',
  key: 'job-1/c9',
  session: 's2',
  protocol: '2026-07-28',
  attempts: [{ attempt: 1, outcome: 'failed', note: 'the server was not reachable' }],
  result: { isError: true, content: [{ type: 'text', text: 'oz0: the call failed' }] },
};

test.each(TRACE_COLUMNS.map((c) => [c.head, c.field, c] as const))(
  'issue 32.8: the table’s column %s shows the field %s, which the JSON has with the same value',
  (head, field, column) => {
    const json = traceJson(trace);
    for (const [i, step] of [plain, ended as StepTrace].entries()) {
      const shown = callsOfJson(json)[i] as unknown as Record<string, unknown>;
      expect(shown).toHaveProperty(field);
      expect(shown[field]).toEqual(step[field]);
    }
    // The cell is read off that field: given `other`'s value of it, a step's cell is `other`'s.
    expect(column.cell(plain)).not.toBe(column.cell(other));
    expect(column.cell({ ...plain, [field]: other[field] })).toBe(column.cell(other));
    expect(formatTrace(trace).split('\n')[1].split(/\s+/)).toContain(head);
  },
);

test('issue 32.8: the table has exactly the declared columns, and the mcp column is the step’s protocol', () => {
  const table = formatTrace(trace).split('\n');
  expect(table[1].trim().split(/\s+/)).toEqual(TRACE_COLUMNS.map((c) => c.head));
  expect(TRACE_COLUMNS.find((c) => c.head === 'mcp')?.field).toBe('protocol');
  expect(table[2]).toContain('2025-11-25');
  expect(traceJson(trace).steps[0]).toMatchObject({ protocol: '2025-11-25' });
});

function callsOfJson(json: ReturnType<typeof traceJson>): StepTrace[] {
  return json.steps.flatMap((s) => ('calls' in s ? (s.calls as StepTrace[]) : [s as StepTrace]));
}
