/**
 * A tenant's share of the platform (model/shares.ts): the priority a job and its calls carry (F1, F4), which caps and
 * rates a call is under (F3), the node's rule for its last slots (F2), and the two checks of shares — the workflow's
 * pure one and the config's zod one — which must agree.
 */
import {
  defaultReserve,
  jobPriority,
  limitsOf,
  grantedCallPriority,
  liveCallPriority,
  mayTakeSlot,
  priorityProblem,
  sharesProblem,
} from '../../model/shares';
import type { SlotAsk } from '../../model/shares';
import { SharesSchema, parseJobSpec } from '../../model/schemas';
import { parseConfig, reserveOf, sharesSeedOf } from '../../common/config';
import { changedShares } from '../../client/tenants';

describe('F1, F4: priority', () => {
  test('a job carries its tenant as its fairness key, and its priority when it asks one', () => {
    expect(jobPriority({ tenant: 'acme' })).toEqual({ fairnessKey: 'acme' });
    expect(jobPriority({ tenant: 'acme', priority: 2 })).toEqual({ fairnessKey: 'acme', priorityKey: 2 });
  });

  test.each([
    [undefined, 2],
    [3, 2],
    [5, 4],
    [1, 1],
  ])('F4: a live session of a job at priority %s calls at %s (one step ahead, at most the first)', (job, call) => {
    expect(liveCallPriority(job)).toBe(call);
  });

  test.each([
    [undefined, 2],
    [4, 3],
    [1, 1],
  ])(
    'F3: a call at priority %s whose turn came is scheduled again at %s (one step ahead: its permit waits)',
    (own, again) => {
      expect(grantedCallPriority(own)).toBe(again);
    },
  );

  test.each([
    [undefined, 3, false],
    [3, 3, false],
    [5, 3, false],
    [2, 3, true],
    [1, 1, false],
  ])('F4: priority %s for a tenant whose highest is %s is refused: %s', (priority, max, refused) => {
    expect(priorityProblem(priority, max) !== undefined).toBe(refused);
  });

  test('F4: a spec’s priority is 1 to 5, whole, and a bad one is refused naming the field', () => {
    expect(parseJobSpec({ tenant: 'a', steps: [{ call: 's.f' }], priority: 1 }).priority).toBe(1);
    for (const bad of [0, 6, 2.5, 'high'])
      expect(() => parseJobSpec({ tenant: 'a', steps: [{ call: 's.f' }], priority: bad })).toThrow(
        /priority: priority is a whole number from 1/,
      );
  });
});

describe('F3: the caps and rates a call is under', () => {
  const limits = { maxRunningCalls: 20, callsPerSecond: 5, servers: { search: { maxRunningCalls: 2 } } };
  test.each([
    ['search', { caps: { '*': 20, 'server:search': 2 }, rates: { '*': 5 } }],
    ['ledger', { caps: { '*': 20 }, rates: { '*': 5 } }],
  ])('a call of %s', (server, expected) => {
    expect(limitsOf(limits, server)).toEqual(expected);
  });
});

describe('F2: a node keeps its last slots for tenants under their share', () => {
  const ask = (over: Partial<SlotAsk>): SlotAsk => ({
    slots: 10,
    reserve: 1,
    busy: 5,
    tenant: 'beta',
    running: new Map(),
    weightOf: () => 1,
    ...over,
  });
  test.each([
    ['free slots beyond the reserve', ask({ busy: 5 }), true],
    ['acme alone takes all but the reserve', ask({ tenant: 'acme', busy: 9, running: new Map([['acme', 8]]) }), true],
    ['acme alone is refused the last slot', ask({ tenant: 'acme', busy: 10, running: new Map([['acme', 9]]) }), false],
    ['beta, running none, takes the last slot', ask({ busy: 10, running: new Map([['acme', 9]]) }), true],
    [
      'acme over its half with beta there is refused',
      ask({
        tenant: 'acme',
        busy: 10,
        running: new Map([
          ['acme', 8],
          ['beta', 1],
        ]),
      }),
      false,
    ],
    [
      'acme weighted 3 keeps its three quarters',
      ask({
        tenant: 'acme',
        busy: 10,
        running: new Map([
          ['acme', 6],
          ['beta', 3],
        ]),
        weightOf: (t) => (t === 'acme' ? 3 : 1),
      }),
      true,
    ],
    [
      'no reserve: any tenant takes any slot',
      ask({ reserve: 0, tenant: 'acme', busy: 10, running: new Map([['acme', 9]]) }),
      true,
    ],
  ])('%s', (_what, slotAsk, allowed) => {
    expect(mayTakeSlot(slotAsk).ok).toBe(allowed);
  });

  test.each([
    [1, 0],
    [3, 0],
    [4, 1],
    [10, 1],
    [100, 5],
    [1000, 50],
  ])('a node of %s slots keeps %s by default', (slots, reserve) => {
    expect(defaultReserve(slots)).toBe(reserve);
    expect(reserveOf({ slots, reserveSlots: undefined })).toBe(reserve);
  });

  test('N6: under upgrade.rollbackSafe a node keeps no slots unless its config says so (a wait the previous release cannot replay)', () => {
    const { node, upgrade } = parseConfig({
      upgrade: { rollbackSafe: true },
      payloads: { store: 'off', seal: { newPayloads: 'plain' } },
    });
    expect(upgrade.rollbackSafe).toBe(true);
    expect(reserveOf(node, upgrade)).toBe(0);
    expect(reserveOf({ ...node, reserveSlots: 3 }, upgrade)).toBe(3);
    // The control: without it, the default holds.
    const plain = parseConfig({});
    expect(plain.upgrade.rollbackSafe).toBe(false);
    expect(reserveOf(plain.node, plain.upgrade)).toBe(defaultReserve(plain.node.slots));
  });
});

describe("F1-F5: a tenant's shares, checked alike by the workflow (pure) and the config (zod)", () => {
  const good = {
    weight: 3,
    maxPriority: 2,
    limits: { maxRunningCalls: 20, servers: { ledger: { callsPerSecond: 5 } } },
  };
  test.each([
    ['good', good, true],
    ['weight 0', { ...good, weight: 0 }, false],
    ['weight 2000', { ...good, weight: 2000 }, false],
    ['maxPriority 0', { ...good, maxPriority: 0 }, false],
    ['maxPriority 2.5', { ...good, maxPriority: 2.5 }, false],
    ['a cap of 0', { ...good, limits: { maxRunningCalls: 0 } }, false],
    ['a rate of 0', { ...good, limits: { callsPerSecond: 0 } }, false],
    ['a rate of 2000', { ...good, limits: { callsPerSecond: 2000 } }, false],
    ['a bad server name', { ...good, limits: { servers: { 'a.b': { maxRunningCalls: 1 } } } }, false],
    ['servers inside a server', { ...good, limits: { servers: { s: { servers: {} } } } }, false],
    ['an unknown field', { ...good, burst: 3 }, false],
    ['an unknown limit', { ...good, limits: { maxQueued: 3 } }, false],
  ])('%s', (_what, shares, valid) => {
    expect(sharesProblem(shares) === undefined).toBe(valid);
    expect(SharesSchema.safeParse(shares).success).toBe(valid);
  });
});

describe('F5: the config seeds a tenant’s shares; a bad one is refused naming the field', () => {
  test('fairness and limits seed the shares; a tenant with neither has none of its own', () => {
    const config = parseConfig({
      tenants: {
        acme: { fairness: { weight: 3 }, limits: { maxRunningCalls: 20, servers: { ledger: { callsPerSecond: 2 } } } },
        beta: { policy: {} },
      },
    });
    expect(sharesSeedOf(config, 'acme')).toEqual({
      weight: 3,
      maxPriority: 3,
      limits: { maxRunningCalls: 20, servers: { ledger: { callsPerSecond: 2 } } },
    });
    expect(sharesSeedOf(config, 'beta')).toBeUndefined();
    expect(sharesSeedOf(config, 'nobody')).toBeUndefined();
  });

  test.each([
    [{ tenants: { beta: { limits: { maxRunningCalls: 0 } } } }, 'tenants.beta.limits.maxRunningCalls'],
    [{ tenants: { beta: { limits: { callsPerSecond: -1 } } } }, 'tenants.beta.limits.callsPerSecond'],
    [{ tenants: { beta: { limits: { burst: 2 } } } }, 'tenants.beta.limits'],
    [{ tenants: { beta: { fairness: { weight: 0 } } } }, 'tenants.beta.fairness.weight'],
    [{ tenants: { beta: { fairness: { maxPriority: 9 } } } }, 'tenants.beta.fairness.maxPriority'],
    [{ node: { slots: 4, reserveSlots: 4 } }, 'node.reserveSlots'],
  ])('%j is refused, naming %s', (input, field) => {
    expect(() => parseConfig(input)).toThrow(field);
  });
});

describe('F5: `oz0 tenant set` changes only what it is given', () => {
  const shares = {
    weight: 1,
    maxPriority: 3,
    limits: { maxRunningCalls: 5, servers: { ledger: { callsPerSecond: 2 } } },
  };
  test.each([
    [{ weight: 3 }, { ...shares, weight: 3 }],
    [{ maxRunningCalls: 20 }, { ...shares, limits: { ...shares.limits, maxRunningCalls: 20 } }],
    [{ maxRunningCalls: null }, { ...shares, limits: { servers: shares.limits.servers } }],
    [
      { server: 'ledger', maxRunningCalls: 1 },
      { ...shares, limits: { ...shares.limits, servers: { ledger: { callsPerSecond: 2, maxRunningCalls: 1 } } } },
    ],
    [
      { server: 'ledger', callsPerSecond: null },
      { ...shares, limits: { maxRunningCalls: 5 } },
    ],
  ])('%j', (change, expected) => {
    expect(changedShares(shares, change)).toEqual(expected);
    // The shares given are never changed in place.
    expect(shares.limits.maxRunningCalls).toBe(5);
  });
});
