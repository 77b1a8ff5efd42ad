import type { Tool } from '@modelcontextprotocol/client';
import { readPriorState } from '../../activities/call/resume';
import type { ServerKind } from '../../common/config';
import { attemptLimitMs, mayBeMadeAgain, timeLimitMarginMs } from '../../activities/call/verdicts';
import { honoursKey } from '../../model/protocol';
import type { AttemptRecord, CallProgressState } from '../../model/schemas';

type Listing = Pick<Tool, 'annotations' | '_meta'>;

const KEY = { 'oz0/idempotency_key': true };

describe('Words: honours the key', () => {
  test.each<[string, Listing, boolean]>([
    ['_meta["oz0/idempotency_key"] === true', { _meta: KEY }, true],
    ['no _meta', {}, false],
    ['_meta without the key', { _meta: { other: true } }, false],
    ['the string "true"', { _meta: { 'oz0/idempotency_key': 'true' } }, false],
    ['1', { _meta: { 'oz0/idempotency_key': 1 } }, false],
    ['false', { _meta: { 'oz0/idempotency_key': false } }, false],
    ['a key in annotations instead', { annotations: { 'oz0/idempotency_key': true } as Tool['annotations'] }, false],
  ])('Words: a listing with %s honours the key: %p', (_what, listing, expected) => {
    expect(honoursKey(listing)).toBe(expected);
  });
});

describe('Words: may be made again', () => {
  const cases: Array<[string, Listing, boolean]> = [
    ['readOnlyHint', { annotations: { readOnlyHint: true } }, true],
    ['readOnlyHint, without the key', { annotations: { readOnlyHint: true }, _meta: {} }, true],
    [
      'readOnlyHint: false, idempotentHint and the key',
      { annotations: { readOnlyHint: false, idempotentHint: true }, _meta: KEY },
      true,
    ],
    ['idempotentHint and the key', { annotations: { idempotentHint: true }, _meta: KEY }, true],
    [
      'idempotentHint, destructiveHint and the key',
      { annotations: { idempotentHint: true, destructiveHint: true }, _meta: KEY },
      true,
    ],
    ['idempotentHint without the key', { annotations: { idempotentHint: true } }, false],
    [
      'idempotentHint, key "true" as a string',
      { annotations: { idempotentHint: true }, _meta: { 'oz0/idempotency_key': 'true' } },
      false,
    ],
    [
      'idempotentHint, key false',
      { annotations: { idempotentHint: true }, _meta: { 'oz0/idempotency_key': false } },
      false,
    ],
    ['the key without idempotentHint', { _meta: KEY }, false],
    ['the key with idempotentHint: false', { annotations: { idempotentHint: false }, _meta: KEY }, false],
    ['no hints at all', {}, false],
    ['only destructiveHint: false', { annotations: { destructiveHint: false } }, false],
    ['only openWorldHint: false', { annotations: { openWorldHint: false } }, false],
    [
      'readOnlyHint as the string "true"',
      { annotations: { readOnlyHint: 'true' } as unknown as Tool['annotations'] },
      false,
    ],
    [
      'idempotentHint as the string "true", with the key',
      { annotations: { idempotentHint: 'true' } as unknown as Tool['annotations'], _meta: KEY },
      false,
    ],
  ];

  describe.each<ServerKind>(['plugin', 'sandbox'])('a %s server', (kind) => {
    test.each(cases)('Words: a function with %s may be made again: %p', (_what, listing, expected) => {
      expect(mayBeMadeAgain(listing, kind, false)).toBe(expected);
      expect(mayBeMadeAgain(listing, kind, true)).toBe(expected);
    });
  });

  test.each(cases)('A2: a remote function with %s, listing not approved, is never made again', (_what, listing) => {
    expect(mayBeMadeAgain(listing, 'remote', false)).toBe(false);
  });

  test.each(cases)(
    'A2: a remote function with %s, listing approved, is judged like any other: %p',
    (_what, listing, expected) => {
      expect(mayBeMadeAgain(listing, 'remote', true)).toBe(expected);
    },
  );
});

describe('C6 time limit', () => {
  test.each([
    [5, 500, 4500],
    [10, 1000, 9000],
    [19, 1900, 17_100],
    [20, 2000, 18_000],
    [60, 2000, 58_000],
    [30, 2000, 28_000],
    [3600, 2000, 3_598_000],
    [1, 100, 900],
    [0.5, 50, 450],
  ])('C6: a %p s timeout keeps a %p ms margin, so an attempt runs %p ms', (timeoutSeconds, margin, limit) => {
    expect(timeLimitMarginMs(timeoutSeconds)).toBe(margin);
    expect(attemptLimitMs(timeoutSeconds)).toBe(limit);
  });

  test('C6: the margin is a tenth just under 20 s, and 2 s from 20 s on', () => {
    expect(timeLimitMarginMs(19.9)).toBeCloseTo(1990, 6);
    expect(timeLimitMarginMs(20)).toBe(2000);
    expect(timeLimitMarginMs(20.1)).toBe(2000);
  });

  test('C6: an attempt always gets at least 1 ms', () => {
    expect(attemptLimitMs(0.0001)).toBe(1);
  });
});

describe('P2 readPriorState', () => {
  const lostNote = expect.stringContaining('ended without a word');
  const lost = (attempt: number): AttemptRecord => ({ attempt, outcome: 'lost', note: lostNote });

  test.each<[string, unknown]>([
    ['undefined', undefined],
    ['null', null],
    ['a string', 'garbage'],
    ['a number', 42],
    ['an array', [1, 2]],
    ['attempts that are no array', { attempts: 'many' }],
    ['an attempt with an unknown outcome', { attempts: [{ attempt: 1, outcome: 'exploded' }] }],
    ['an attempt numbered 0', { attempts: [{ attempt: 0, outcome: 'ok' }] }],
    ['progress that is no number', { progress: 'half', attempts: [] }],
  ])('P2: details that are %s give the first attempt no history', (_what, details) => {
    expect(readPriorState(details, 1)).toEqual({ attempts: [] });
  });

  test.each<[string, unknown]>([
    ['undefined', undefined],
    ['garbage', 'garbage'],
    ['an empty state', { attempts: [] }],
  ])('P2: details that are %s give attempt 3 a lost record for attempts 1 and 2', (_what, details) => {
    expect(readPriorState(details, 3).attempts).toEqual([lost(1), lost(2)]);
  });

  test('P2: a missing earlier attempt gets a lost record, in order among the ones recorded', () => {
    const details: CallProgressState = {
      attempts: [
        { attempt: 3, outcome: 'busy', note: 'wait 1 s' },
        { attempt: 1, outcome: 'timeout' },
      ],
    };
    expect(readPriorState(details, 5).attempts).toEqual([
      { attempt: 1, outcome: 'timeout' },
      lost(2),
      { attempt: 3, outcome: 'busy', note: 'wait 1 s' },
      lost(4),
    ]);
  });

  test('P2: records of this attempt or later ones are dropped', () => {
    const details: CallProgressState = {
      attempts: [
        { attempt: 1, outcome: 'busy' },
        { attempt: 2, outcome: 'ok' },
        { attempt: 3, outcome: 'error' },
      ],
    };
    expect(readPriorState(details, 2).attempts).toEqual([{ attempt: 1, outcome: 'busy' }]);
    expect(readPriorState(details, 1).attempts).toEqual([]);
  });

  test('P2: progress, total, token and unsent attempts are carried over', () => {
    const details: CallProgressState = {
      progress: 2,
      total: 4,
      token: 'tok-2',
      unsent: [1],
      attempts: [
        { attempt: 1, outcome: 'failed', note: 'not reachable' },
        { attempt: 2, outcome: 'timeout', progress: { progress: 2, total: 4 } },
      ],
    };
    expect(readPriorState(details, 3)).toEqual(details);
  });

  test('P2: progress without a total is carried over as it is', () => {
    const state = readPriorState({ progress: 7, attempts: [{ attempt: 1, outcome: 'timeout' }] }, 2);
    expect(state).toEqual({ progress: 7, attempts: [{ attempt: 1, outcome: 'timeout' }] });
    expect(state.total).toBeUndefined();
  });

  test('P2: an attempt that reported nothing passes on what the attempt before it left', () => {
    // Attempt 1 got to 2 of 4 and timed out; attempt 2 failed before its server said anything; attempt 3 reads.
    const afterFirst: CallProgressState = {
      progress: 2,
      total: 4,
      attempts: [{ attempt: 1, outcome: 'timeout', progress: { progress: 2, total: 4 } }],
    };
    const second = readPriorState(afterFirst, 2);
    const afterSecond = { ...second, attempts: [...second.attempts, { attempt: 2, outcome: 'failed' }] };
    const third = readPriorState(afterSecond, 3);
    expect(third).toMatchObject({ progress: 2, total: 4 });
    expect(third.attempts.map((a) => [a.attempt, a.outcome])).toEqual([
      [1, 'timeout'],
      [2, 'failed'],
    ]);
  });

  test('P2: unknown extra fields in the details do not throw the history away', () => {
    const state = readPriorState({ progress: 1, attempts: [{ attempt: 1, outcome: 'busy' }], extra: true }, 2);
    expect(state).toMatchObject({ progress: 1, attempts: [{ attempt: 1, outcome: 'busy' }] });
  });

  test('P2: readPriorState does not change the details it reads', () => {
    const details: CallProgressState = { attempts: [{ attempt: 2, outcome: 'busy' }] };
    readPriorState(details, 3);
    expect(details).toEqual({ attempts: [{ attempt: 2, outcome: 'busy' }] });
  });
});
