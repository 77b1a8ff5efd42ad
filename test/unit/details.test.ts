/**
 * What a job shows of itself in the Temporal UI (T3): its summary and details at start, its current details while it
 * runs, and each call's activity summary, short enough for the history's column.
 */
import { SUMMARY_MAX, callSummary, currentDetails, jobDetails, jobSummary } from '../../model/details';
import { durationInWords } from '../../workflows/questions';
import { waitedInWords } from '../../client/calls';
import type { JobSpec } from '../../model/schemas';
import type { SessionTrace } from '../../model/job';

const spec: JobSpec = {
  tenant: 'acme',
  steps: [
    { call: 'ledger.charge', args: { order_id: 'o-1', amount: 500 } },
    { session: [{ call: 'ledger.set_status' }, { call: 'ledger.set_status' }, { call: 'reader.echo' }] },
    { session: { harness: 'refunds', input: {} } },
    { session: { external: true } },
  ],
};

test('T3: the summary says the tenant, the steps, the live sessions and the tools, on one line', () => {
  expect(jobSummary(spec)).toBe('acme · 4 steps · 2 live sessions · ledger.charge, ledger.set_status, reader.echo');
  expect(jobSummary({ tenant: 'acme', steps: [{ session: { external: true } }] })).toBe(
    'acme · 1 step · 1 live session',
  );
});

test('T3: a summary with many tools names as many as fit and counts the rest', () => {
  const many: JobSpec = {
    tenant: 'acme',
    steps: Array.from({ length: 40 }, (_, i) => ({ call: `server${i}.function_with_a_long_name` })),
  };
  const summary = jobSummary(many);
  expect(summary.length).toBeLessThanOrEqual(SUMMARY_MAX);
  expect(summary).toMatch(/^acme · 40 steps · server0\.function_with_a_long_name, .* \+\d+$/);
});

test('T3: the details list the steps in order and the tools', () => {
  expect(jobDetails(spec)).toBe(
    [
      'Tenant `acme`, 4 steps.',
      '',
      '1. call `ledger.charge`',
      '2. session of 3 calls: `ledger.set_status` ×2, `reader.echo`',
      '3. live session: harness `refunds`',
      '4. live session: an external client (H9)',
      '',
      'Tools: `ledger.charge`, `ledger.set_status`, `reader.echo`',
    ].join('\n'),
  );
  const long = jobDetails({ tenant: 't', steps: Array.from({ length: 25 }, () => ({ call: 'a.b' })) });
  expect(long).toContain('20. call `a.b`');
  expect(long).not.toContain('21. call');
  expect(long).toContain('… and 5 more steps');
});

test.each([
  ['ledger.charge', 'job-20261202143332-5qfjx8/c1', 'ledger.charge · …/c1'],
  ['ledger.charge', 'job-20261202143332-5qfjx8/r2/c17', 'ledger.charge · …/r2/c17'],
  [
    'ledger.set_status',
    'job-20261202143332-5qfjx8/s1/set_status#6661f6d2b476e1030ea9bf1937700329/1',
    'ledger.set_status · …/s1/set_status#6661f6d2…/1',
  ],
  [
    'ledger.set_status',
    'job-20261202143332-5qfjx8/r1/s3/set_status#017d107735af7e53f44833d800ffad58/12',
    'ledger.set_status · …/r1/s3/set_status#017d1077…/12',
  ],
])('T3: the activity summary of %s under %s is %s', (tool, key, summary) => {
  expect(callSummary(tool, key, 'job-20261202143332-5qfjx8')).toBe(summary);
  expect(summary.length).toBeLessThanOrEqual(52);
});

test('T3: a very long tool name still gives a summary of bounded length', () => {
  const tool = `s.${'f'.repeat(190)}`;
  expect(callSummary(tool, 'j/c1', 'j').length).toBe(SUMMARY_MAX);
});

test('T3: the current details name the running calls, their keys and sessions, and the open live sessions', () => {
  const session: SessionTrace = {
    session: 's2',
    kind: 'harness',
    harness: 'refunds',
    status: 'running',
    runs: [{ run: 1, node: 'node-a/7' }],
    calls: [],
    omitted: 0,
  };
  const details = currentDetails({
    jobId: 'job-1',
    waiting: [],
    status: 'running',
    run: 1,
    calls: 12,
    step: 2,
    steps: 4,
    summary: jobSummary(spec),
    running: [
      { activityId: 'c3', tool: 'ledger.charge', key: 'j/r1/c3', session: null },
      { activityId: 'c4', tool: 'reader.echo', key: 'j/r1/c4', session: 's2', sessionRun: 1 },
    ],
    trace: [session],
  });
  expect(details.split('\n')).toEqual([
    '**running** · run 1, step 3 of 4 · 12 calls made so far',
    '',
    jobSummary(spec),
    '',
    'Running now (attempt and progress: its pending activity):',
    '- `ledger.charge` · activity `c3` · key `j/r1/c3`',
    '- `reader.echo` · activity `c4` in s2 run 1 · key `j/r1/c4`',
    '',
    'Session s2 (harness `refunds`): running, run 1 on `node-a/7`, 0 calls so far.',
  ]);
});

test('T3: many running calls are listed up to ten, the rest counted', () => {
  const running = Array.from({ length: 13 }, (_, i) => ({
    activityId: `c${i + 1}`,
    tool: 'a.b',
    key: `j/c${i + 1}`,
    session: 's1',
  }));
  const details = currentDetails({
    jobId: 'job-1',
    waiting: [],
    status: 'cancelling',
    run: 0,
    calls: 13,
    step: 0,
    steps: 1,
    summary: 'x',
    running,
    trace: [],
  });
  expect(details).toContain('`c10`');
  expect(details).not.toContain('`c11`');
  expect(details).toContain('… and 3 more');
});

test('A4: the current details name each call that waits for a person: tool, call, key, its time and its arguments', () => {
  const details = currentDetails({
    jobId: 'job-1',
    waiting: [
      {
        n: 2,
        activityId: 'c2',
        tool: 'ledger.refund',
        key: 'job-1/c2',
        session: null,
        args: '{"order_id":"o-1","memo":{"password":"[redacted]"},"note":"`x`"}',
        pattern: 'ledger.*',
        askedAt: '2026-12-04T10:00:00.000Z',
        until: '2026-12-05T10:00:00.000Z',
      },
    ],
    status: 'waiting',
    run: 0,
    calls: 2,
    step: 1,
    steps: 2,
    summary: 'acme · 2 steps · ledger.refund',
    running: [],
    trace: [],
  });
  expect(details.split('\n')).toEqual([
    '**waiting** · run 0, step 2 of 2 · 2 calls made so far',
    '',
    'acme · 2 steps · ledger.refund',
    '',
    "Waiting for a person's yes (`oz0 call approve job-1 CALL` or `oz0 call deny …`):",
    '- `ledger.refund` · call `c2` · key `job-1/c2` · asked 2026-12-04T10:00:00.000Z, refused unanswered at 2026-12-05T10:00:00.000Z',
    '  arguments: `{"order_id":"o-1","memo":{"password":"[redacted]"},"note":"\'x\'"}`',
  ]);
});

test.each([
  [2, '2 s'],
  [90, '90 s'],
  [600, '10 min'],
  [7200, '2 h'],
  [86400, '1 d'],
  [86400 * 3, '3 d'],
  [5400, '90 min'],
])('A6: a time limit of %s s is said "%s"', (seconds, words) => {
  expect(durationInWords(seconds)).toBe(words);
});

test.each([
  [0, '0 s'],
  [12_400, '12 s'],
  [192_000, '3 min 12 s'],
  [3_600_000, '1 h'],
  [7_500_000, '2 h 5 min'],
  [97_200_000, '1 d 3 h'],
])('A4: a wait of %s ms is said "%s"', (ms, words) => {
  expect(waitedInWords(ms)).toBe(words);
});
