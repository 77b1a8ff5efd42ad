/** Pure rules of policy (A1, A2, A4, A5, C5) and busy answers (B1-B4), table-driven. */
import { busyVerdict, waitInWords } from '../../activities/call/verdicts';
import { busyOf, parseRetryAfter } from '../../model/protocol';
import { answerProblem, watchedQuestionProblem } from '../../model/checks';
import {
  decisionFor,
  emptyState,
  killedBy,
  listingChanges,
  listingDigest,
  matches,
  verdict,
} from '../../model/policy-rules';

test.each([
  ['*', 'a.b', true],
  ['a.*', 'a.b', true],
  ['a.*', 'ab.c', false],
  ['a.b', 'a.b', true],
  ['a.b', 'a.bc', false],
])('C5/A1: pattern %s matches %s: %s', (pattern, tool, expected) => {
  expect(matches(pattern, tool)).toBe(expected);
});

test('C5: a kill switch for a tool, a server or everything', () => {
  expect(killedBy(['ledger.*'], 'ledger.charge')).toBe('ledger.*');
  expect(killedBy(['files.read'], 'ledger.charge')).toBeUndefined();
});

test.each([
  [{ 'ledger.charge': 'deny', 'ledger.*': 'allow', '*': 'ask' }, 'ledger.charge', false, 'deny'],
  [{ 'ledger.*': 'allow', '*': 'deny' }, 'ledger.charge', false, 'allow'],
  [{ '*': 'deny' }, 'ledger.charge', false, 'deny'],
  [{}, 'ledger.charge', false, 'allow'],
  [{}, 'search.find', true, 'ask'],
] as const)(
  'A1: the most specific pattern wins, else the kind’s default (%j, %s)',
  (policy, tool, remote, expected) => {
    expect(decisionFor({ ...policy }, tool, remote).decision).toBe(expected);
  },
);

describe('A2: verdicts on listings', () => {
  const tools = [{ name: 'find', description: 'finds', annotations: { readOnlyHint: true } }];
  const listing = listingDigest(tools);
  const approvedState = () => {
    const state = emptyState();
    state.approvals.search = { digest: listing.digest, tools: listing.tools, approvedAt: 'now' };
    return state;
  };

  test('a remote server runs only with its current listing approved, whatever the policy', () => {
    const state = emptyState({ 'search.*': 'allow' });
    expect(verdict({ state, globalKills: [], tool: 'search.find', remote: true, listing })).toMatchObject({
      allowed: false,
      why: expect.stringContaining('needs approval'),
    });
    expect(verdict({ state: approvedState(), globalKills: [], tool: 'search.find', remote: true, listing })).toEqual({
      allowed: true,
      approved: true,
    });
  });

  test('a changed listing needs a new approval, and says what changed', () => {
    const changed = listingDigest([{ ...tools[0], description: 'finds and keeps' }, { name: 'delete' }]);
    const v = verdict({ state: approvedState(), globalKills: [], tool: 'search.find', remote: true, listing: changed });
    expect(v).toMatchObject({ allowed: false, why: expect.stringContaining('delete added, find changed') });
  });

  test('key order in the listing never changes its digest (RFC 8785)', () => {
    expect(listingDigest([{ annotations: { readOnlyHint: true }, description: 'finds', name: 'find' }]).digest).toBe(
      listing.digest,
    );
  });

  test('listingChanges names added, changed and removed tools', () => {
    expect(listingChanges({ a: '1', b: '2' }, { a: '1', b: '3', c: '4' })).toEqual(['b changed', 'c added']);
    expect(listingChanges({ a: '1' }, {})).toEqual(['a removed']);
  });

  test('deny and kill switches refuse before anything else', () => {
    expect(
      verdict({ state: emptyState({ 'probe.*': 'deny' }), globalKills: [], tool: 'probe.x', remote: false }),
    ).toMatchObject({
      allowed: false,
      why: expect.stringContaining('denied'),
    });
    expect(verdict({ state: emptyState(), globalKills: ['probe.x'], tool: 'probe.x', remote: false })).toMatchObject({
      allowed: false,
      why: expect.stringContaining('killed'),
    });
  });
});

describe('A4: confirm, a verdict that waits for a person', () => {
  test.each([
    [{ 'ledger.refund': 'confirm' }, 'ledger.refund', 'ledger.refund'],
    [{ 'ledger.*': 'confirm', 'ledger.lookup': 'allow' }, 'ledger.refund', 'ledger.*'],
    [{ '*': 'confirm' }, 'files.write', '*'],
  ] as const)('%j: %s runs once a person said yes (pattern %s)', (policy, tool, pattern) => {
    expect(verdict({ state: emptyState({ ...policy }), globalKills: [], tool, remote: false })).toEqual({
      allowed: true,
      approved: false,
      confirm: pattern,
    });
  });

  test('a more specific pattern, a deny and a kill switch win over confirm', () => {
    const state = emptyState({ 'ledger.*': 'confirm', 'ledger.lookup': 'allow', 'ledger.drop': 'deny' });
    expect(verdict({ state, globalKills: [], tool: 'ledger.lookup', remote: false })).toEqual({
      allowed: true,
      approved: false,
    });
    expect(verdict({ state, globalKills: [], tool: 'ledger.drop', remote: false })).toMatchObject({ allowed: false });
    expect(verdict({ state, globalKills: ['ledger.*'], tool: 'ledger.refund', remote: false })).toMatchObject({
      allowed: false,
      why: expect.stringContaining('killed'),
    });
  });

  test('a remote server still needs its listing approved before anyone is asked (A2)', () => {
    const listing = listingDigest([{ name: 'find' }]);
    const state = emptyState({ 'search.*': 'confirm' });
    expect(verdict({ state, globalKills: [], tool: 'search.find', remote: true, listing })).toMatchObject({
      allowed: false,
      why: expect.stringContaining('needs approval'),
    });
    state.approvals.search = { digest: listing.digest, tools: listing.tools, approvedAt: 'now' };
    expect(verdict({ state, globalKills: [], tool: 'search.find', remote: true, listing })).toEqual({
      allowed: true,
      approved: true,
      confirm: 'search.*',
    });
  });
});

test.each([
  [{ approve: true, by: 'alice' }, undefined],
  [{ call: 'c3', approve: false, by: 'bob', reason: 'no' }, undefined],
  [{ approve: 'yes', by: 'alice' }, 'approve is true or false'],
  [{ approve: true }, 'by names who answers: 1-200 characters'],
  [{ approve: true, by: '  ' }, 'by names who answers: 1-200 characters'],
  [{ approve: true, by: 'a', reason: 'x'.repeat(1001) }, 'reason is a string of at most 1000 characters'],
  [{ approve: true, by: 'a', call: '' }, "call is the step's number, its activity id (c3) or its key"],
  [{ approve: true, by: 'a', also: 1 }, 'an answer has no field "also"'],
  [[], 'an answer is { call?, approve, by, reason? }'],
])('A5: answerCall(%j) is refused for: %s', (input, problem) => {
  expect(answerProblem(input)).toBe(problem);
});

test.each([
  [{ jobId: 'j', key: 'j/c1', tool: 'ledger.refund', until: 1 }, undefined],
  [{ jobId: 'j', key: 'j/c1', tool: 'ledger', until: 1 }, 'a tool is "<server>.<function>", e.g. "ledger.charge"'],
  [{ jobId: 'j', key: '', tool: 'a.b', until: 1 }, "a question's key is 1-1000 characters"],
  [{ jobId: 'j', key: 'k', tool: 'a.b', until: 'soon' }, "a question's until is a time in ms"],
  [{ jobId: 'j', key: 'k', tool: 'a.b', until: 1, x: 1 }, 'a question has no field "x"'],
])('A4: a watched question %j is refused for: %s', (question, problem) => {
  expect(watchedQuestionProblem(question)).toBe(problem);
});

test.each([
  [{ isError: true, _meta: { 'oz0/retryable': true, 'oz0/retry_after': 2 } }, { retryAfter: 2 }],
  [{ isError: true, _meta: { 'oz0/retryable': true } }, {}],
  [{ isError: true, _meta: { 'oz0/retryable': true, 'oz0/retry_after': 'soon' } }, {}],
  [{ isError: true, _meta: { 'oz0/retryable': 'true' } }, undefined],
  [{ isError: false, _meta: { 'oz0/retryable': true } }, undefined],
])('B1: busyOf(%j)', (result, expected) => {
  expect(busyOf(result)).toEqual(expected);
});

test.each([
  ['5', 5],
  ['0', 0],
  ['Wed, 02 Dec 2026 15:00:10 GMT', 10],
  ['soon', undefined],
  [null, undefined],
])('B4: Retry-After %s is %s seconds', (header, expected) => {
  expect(parseRetryAfter(header, Date.parse('Wed, 02 Dec 2026 15:00:00 GMT'))).toBe(expected);
});

test.each([
  [{ again: true, lastAttempt: false, retryAfter: 2 }, true],
  [{ again: true, lastAttempt: false, retryAfter: 60 }, true],
  [{ again: true, lastAttempt: false, retryAfter: 61 }, false],
  [{ again: true, lastAttempt: false }, true],
  [{ again: true, lastAttempt: true, retryAfter: 1 }, false],
  [{ again: false, lastAttempt: false, retryAfter: 1 }, false],
])('B2/B3: busyVerdict(%j) retries: %s', (input, retry) => {
  const v = busyVerdict(input);
  expect(v.retry).toBe(retry);
  const wait = (input as { retryAfter?: number }).retryAfter;
  if (v.retry && wait !== undefined) expect(v.delayMs).toBe(wait * 1000);
  if (!v.retry) expect(v.words).toMatch(/^The service is busy/);
});

test.each([
  [0.5, 'less than a second'],
  [1, '1 second'],
  [45, '45 seconds'],
  [90, '90 seconds'],
  [125.4, '125 seconds'],
  [599, '599 seconds'],
  [600, '10 minutes'],
  [5399, '90 minutes'],
  [7200, '2 hours'],
  [9000, '2.5 hours'],
])('B3: %s s in words is "%s"', (seconds, words) => {
  expect(waitInWords(seconds)).toBe(words);
});
