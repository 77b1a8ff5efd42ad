import { createHash } from 'node:crypto';
import { argsDigest, defaultKey, SessionKeys, sessionKey } from '../../model/keys';

/** The K3 digest, computed here on its own from a canonical string written out by hand. */
function digestOf(canonical: string): string {
  return createHash('sha256').update(canonical, 'utf8').digest('hex').slice(0, 32);
}

describe('K2 default key', () => {
  test.each([
    ['job-1', 0, '1', 'job-1/1'],
    ['job-1', 0, '17', 'job-1/17'],
    ['job-1', 1, '1', 'job-1/r1/1'],
    ['job-1', 3, '42', 'job-1/r3/42'],
    ['acme/order-7', 12, 'call-9', 'acme/order-7/r12/call-9'],
  ])('K2: defaultKey(%p, run %p, activity %p) is %p', (job, run, activity, key) => {
    expect(defaultKey(job, run, activity)).toBe(key);
  });

  test('K2: different for every call of a run, and for the same activity id in another run', () => {
    const keys = [defaultKey('j', 0, '1'), defaultKey('j', 0, '2'), defaultKey('j', 1, '1'), defaultKey('j', 2, '1')];
    expect(new Set(keys).size).toBe(keys.length);
  });
});

describe('K3 digest', () => {
  test.each<[string, Record<string, unknown> | undefined, string]>([
    ['the example charge', { order_id: 'o-1', amount: 500 }, '{"amount":500,"order_id":"o-1"}'],
    ['a status change', { id: 't-1', status: 'open' }, '{"id":"t-1","status":"open"}'],
    ['nested objects and arrays', { b: [3, { z: 1, a: null }], a: true }, '{"a":true,"b":[3,{"a":null,"z":1}]}'],
    ['no arguments', undefined, '{}'],
    ['empty arguments', {}, '{}'],
    ['1e21', { n: 1e21 }, '{"n":1e+21}'],
    ['0.1', { n: 0.1 }, '{"n":0.1}'],
    ['-0', { n: -0 }, '{"n":0}'],
    ['integers up to 2^53', { n: 9007199254740991 }, '{"n":9007199254740991}'],
    [
      'the RFC 8785 number vector',
      // The vector is written as RFC 8785 writes it: its first number has more digits than a double keeps.
      // eslint-disable-next-line no-loss-of-precision
      { numbers: [333333333.33333329, 1e30, 4.5, 2e-3, 0.000000000000000000000000001] },
      '{"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27]}',
    ],
    [
      'unicode strings, unescaped, and escapes RFC 8785 keeps',
      { s: 'Grüße € 😀 \u2028', e: 'tab\tquote"back\\nul\u0000' },
      '{"e":"tab\\tquote\\"back\\\\nul\\u0000","s":"Grüße € 😀 \u2028"}',
    ],
    [
      'the RFC 8785 key-sorting vector (UTF-16 code units)',
      {
        '\u20ac': 'Euro Sign',
        '\r': 'Carriage Return',
        '\ufb33': 'Hebrew Letter Dalet With Dagesh',
        '1': 'One',
        '\ud83d\ude00': 'Emoji: Grinning Face',
        '\u0080': 'Control',
        '\u00f6': 'Latin Small Letter O With Diaeresis',
      },
      '{"\\r":"Carriage Return","1":"One","\u0080":"Control","\u00f6":"Latin Small Letter O With Diaeresis",' +
        '"\u20ac":"Euro Sign","\ud83d\ude00":"Emoji: Grinning Face","\ufb33":"Hebrew Letter Dalet With Dagesh"}',
    ],
  ])('K3: digest of %s is SHA-256 of its RFC 8785 form, first 32 hex', (_what, args, canonical) => {
    const digest = argsDigest(args);
    expect(digest).toBe(digestOf(canonical));
    expect(digest).toMatch(/^[0-9a-f]{32}$/);
  });

  test.each<[string, Record<string, unknown> | undefined, string]>([
    ['the example charge', { order_id: 'o-1', amount: 500 }, '383805880ae7b1c89091d712e56beeaf'],
    ['no arguments', undefined, '44136fa355b3678a1146ad16f7e8649e'],
  ])('K3: %s has a pinned digest', (_what, args, digest) => {
    expect(argsDigest(args)).toBe(digest);
  });

  test.each<[string, Record<string, unknown>, Record<string, unknown>]>([
    ['top level', { order_id: 'o-1', amount: 500 }, { amount: 500, order_id: 'o-1' }],
    ['nested', { a: { x: 1, y: [{ q: 1, p: 2 }] }, b: 2 }, { b: 2, a: { y: [{ p: 2, q: 1 }], x: 1 } }],
  ])('K3: key order never changes the digest (%s)', (_what, one, other) => {
    expect(argsDigest(one)).toBe(argsDigest(other));
  });

  test('K3: no arguments and {} have the same digest', () => {
    expect(argsDigest(undefined)).toBe(argsDigest({}));
    expect(argsDigest(undefined)).toBe(digestOf('{}'));
  });

  test.each<[string, Record<string, unknown>, Record<string, unknown>]>([
    ['another value', { amount: 500 }, { amount: 501 }],
    ['a number and its string', { amount: 500 }, { amount: '500' }],
    ['array order', { a: [1, 2] }, { a: [2, 1] }],
  ])('K3: other arguments have another digest (%s)', (_what, one, other) => {
    expect(argsDigest(one)).not.toBe(argsDigest(other));
  });
});

describe('K3 session key', () => {
  const d = digestOf('{}');

  test.each([
    ['job-1', 0, 1, 'ledger.set_status', 1, `job-1/s1/ledger.set_status#${d}/1`],
    ['job-1', 0, 2, 'ledger.set_status', 3, `job-1/s2/ledger.set_status#${d}/3`],
    ['job-1', 1, 1, 'ledger.set_status', 1, `job-1/r1/s1/ledger.set_status#${d}/1`],
    ['job-1', 4, 7, 'files.write', 2, `job-1/r4/s7/files.write#${d}/2`],
  ])('K3: sessionKey(%p, run %p, session %p, %p, k %p) is %p', (job, run, session, fn, k, key) => {
    expect(sessionKey(job, run, session, fn, d, k)).toBe(key);
  });
});

describe('K3/K4 SessionKeys', () => {
  const open = { id: 't-1', status: 'open' };
  const closed = { id: 't-1', status: 'closed' };
  const openDigest = digestOf('{"id":"t-1","status":"open"}');
  const closedDigest = digestOf('{"id":"t-1","status":"closed"}');

  test('K4: open, closed, open get …/1, …/1, …/2', () => {
    const keys = new SessionKeys('job-1', 0, 1);
    expect([
      keys.next('ledger.set_status', open),
      keys.next('ledger.set_status', closed),
      keys.next('ledger.set_status', open),
    ]).toEqual([
      `job-1/s1/ledger.set_status#${openDigest}/1`,
      `job-1/s1/ledger.set_status#${closedDigest}/1`,
      `job-1/s1/ledger.set_status#${openDigest}/2`,
    ]);
  });

  test('K4: other calls in between do not change the count', () => {
    const keys = new SessionKeys('job-1', 0, 1);
    expect(keys.next('ledger.set_status', open)).toMatch(/\/1$/);
    keys.next('ledger.charge', { order_id: 'o-1', amount: 500 });
    keys.next('files.write', open);
    keys.next('ledger.set_status', closed);
    expect(keys.next('ledger.set_status', open)).toBe(`job-1/s1/ledger.set_status#${openDigest}/2`);
  });

  test('K3: different functions with the same arguments count separately', () => {
    const keys = new SessionKeys('job-1', 0, 1);
    expect(keys.next('ledger.set_status', open)).toBe(`job-1/s1/ledger.set_status#${openDigest}/1`);
    expect(keys.next('tickets.set_status', open)).toBe(`job-1/s1/tickets.set_status#${openDigest}/1`);
    expect(keys.next('ledger.set_status', open)).toBe(`job-1/s1/ledger.set_status#${openDigest}/2`);
    expect(keys.next('tickets.set_status', open)).toBe(`job-1/s1/tickets.set_status#${openDigest}/2`);
  });

  test('K3: the same arguments in another key order count as the same call', () => {
    const keys = new SessionKeys('job-1', 0, 1);
    keys.next('ledger.set_status', { id: 't-1', status: 'open' });
    expect(keys.next('ledger.set_status', { status: 'open', id: 't-1' })).toBe(
      `job-1/s1/ledger.set_status#${openDigest}/2`,
    );
  });

  test('K3: no arguments count as {}', () => {
    const keys = new SessionKeys('job-1', 0, 1);
    expect(keys.next('ledger.ping', undefined)).toBe(`job-1/s1/ledger.ping#${digestOf('{}')}/1`);
    expect(keys.next('ledger.ping', {})).toBe(`job-1/s1/ledger.ping#${digestOf('{}')}/2`);
  });

  test('K3: after m continues-as-new, r<m>/ comes before s<n>', () => {
    const keys = new SessionKeys('job-1', 2, 5);
    expect(keys.next('ledger.set_status', open)).toBe(`job-1/r2/s5/ledger.set_status#${openDigest}/1`);
  });

  test('K3: each session counts on its own', () => {
    const s1 = new SessionKeys('job-1', 0, 1);
    const s2 = new SessionKeys('job-1', 0, 2);
    s1.next('ledger.set_status', open);
    expect(s2.next('ledger.set_status', open)).toBe(`job-1/s2/ledger.set_status#${openDigest}/1`);
  });

  test('K4: a fresh session of the same number replaying the same calls gets the same keys', () => {
    const calls: Array<[string, Record<string, unknown> | undefined]> = [
      ['ledger.set_status', open],
      ['ledger.charge', { order_id: 'o-1', amount: 500 }],
      ['ledger.set_status', closed],
      ['ledger.set_status', open],
      ['ledger.ping', undefined],
    ];
    const lost = new SessionKeys('job-1', 1, 3);
    const fresh = new SessionKeys('job-1', 1, 3);
    const before = calls.map(([fn, args]) => lost.next(fn, args));
    const after = calls.map(([fn, args]) => fresh.next(fn, args));
    expect(after).toEqual(before);
    expect(new Set(before).size).toBe(calls.length);
  });
});
