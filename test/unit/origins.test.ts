/**
 * A13: where a tenant's durable policy and shares came from (model/origins.ts), and what a node says at start where its
 * config differs from them: one sentence a field, with the command that would change it. Table-driven.
 */
import {
  changedShareFields,
  configDifferences,
  originsProblem,
  policySources,
  shareCommand,
  shareFieldsProblem,
  shareSources,
} from '../../model/origins';
import type { Origins, Seeded } from '../../model/origins';
import { emptyState } from '../../model/policy-rules';
import { OriginsSchema } from '../../model/schemas';
import { defaultShares } from '../../model/shares';
import type { Shares } from '../../model/shares';
import { changedFields } from '../../client/tenants';

const shares = (limits: Shares['limits'], more: Partial<Shares> = {}): Shares => ({
  ...defaultShares(),
  limits,
  ...more,
});
const seeded: Origins = { policy: [], shares: [], complete: true };

describe('A13: what a node says where its config differs from a durable policy', () => {
  test.each([
    [
      'a rate the config adds, over shares an earlier config seeded',
      { policy: {}, shares: shares({ callsPerSecond: 5 }) },
      { ...emptyState({}, shares({ maxRunningCalls: 2 })) },
      seeded,
      [
        'tenant beta: limits.callsPerSecond is 5 in the config but none in its durable policy (from the config that ' +
          'first seeded it), which is what runs; to change it: oz0 tenant set beta --rate 5',
        'tenant beta: limits.maxRunningCalls is none in the config but 2 in its durable policy (from the config that ' +
          'first seeded it), which is what runs; to change it: oz0 tenant set beta --max-running none',
      ],
    ],
    [
      "a weight a command set, and a server's cap",
      { policy: {}, shares: shares({ servers: { ledger: { maxRunningCalls: 4 } } }) },
      { ...emptyState({}, shares({}, { weight: 3 })) },
      { ...seeded, shares: ['weight'] },
      [
        'tenant beta: limits.servers.ledger.maxRunningCalls is 4 in the config but none in its durable policy (from ' +
          'the config that first seeded it), which is what runs; to change it: oz0 tenant set beta --server ledger ' +
          '--max-running 4',
        'tenant beta: fairness.weight is 1 in the config but 3 in its durable policy (set by a command), which is ' +
          'what runs; to change it: oz0 tenant set beta --weight 1',
      ],
    ],
    [
      'patterns: one a command changed, one the config adds, one the config no longer names',
      { policy: { 'ledger.*': 'allow', 'files.read': 'deny' } as Seeded['policy'] },
      emptyState({ 'ledger.*': 'deny', 'search.*': 'ask' }),
      { ...seeded, policy: ['ledger.*'] },
      [
        'tenant beta: policy ledger.* is allow in the config but deny in its durable policy (set by a command), which ' +
          "is what runs; to change it: oz0 policy set beta 'ledger.*' allow",
        'tenant beta: policy files.read is deny in the config but not set in its durable policy, which is what runs; ' +
          'to change it: oz0 policy set beta files.read deny',
        'tenant beta: policy search.* is ask in its durable policy (from the config that first seeded it), which the ' +
          "config does not name; it stays (no command takes a pattern off; oz0 policy set beta 'search.*' … changes it)",
      ],
    ],
    [
      'a run an older oz0 continued: where its shares came from is not known',
      { policy: {} },
      emptyState({}, shares({}, { maxPriority: 2 })),
      { ...seeded, complete: false },
      [
        'tenant beta: fairness.maxPriority is 3 in the config but 2 in its durable policy (from before oz0 recorded ' +
          'where it came from), which is what runs; to change it: oz0 tenant set beta --max-priority 3',
      ],
    ],
    [
      'the same config: nothing (the control)',
      { policy: { 'ledger.*': 'allow' }, shares: shares({ maxRunningCalls: 2 }) },
      emptyState({ 'ledger.*': 'allow' }, shares({ maxRunningCalls: 2 })),
      seeded,
      [],
    ],
    [
      'durable state with no shares of its own: each node takes its config’s, nothing differs',
      { policy: {}, shares: shares({ callsPerSecond: 5 }) },
      emptyState({}),
      seeded,
      [],
    ],
  ] as const)('%s', (_what, config, state, origins, lines) => {
    expect(configDifferences('beta', config as Seeded, state, origins as Origins)).toEqual(lines);
  });
});

describe('A13: where each field came from', () => {
  test('shares: a command’s fields are set, a cap it took off included; the rest the seed’s', () => {
    const state = emptyState({}, shares({ maxRunningCalls: 2 }, { weight: 3 }));
    const origins = { ...seeded, shares: ['limits.callsPerSecond', 'weight'] };
    expect(shareSources(state, origins, undefined)).toEqual({
      weight: 'set',
      maxPriority: 'config',
      'limits.maxRunningCalls': 'config',
      'limits.callsPerSecond': 'set',
    });
    // No shares of its own: each node's config seed, else the defaults.
    expect(shareSources(emptyState({}), seeded, shares({ callsPerSecond: 5 }))).toEqual({
      weight: 'config',
      maxPriority: 'config',
      'limits.callsPerSecond': 'config',
    });
    expect(shareSources(emptyState({}), seeded, undefined)).toEqual({ weight: 'defaults', maxPriority: 'defaults' });
    // An older bundle answers no origins: not known.
    expect(shareSources(state, undefined, undefined).weight).toBe('unknown');
  });

  test('policy: each pattern the seed’s or a command’s; unknown past an older oz0’s run', () => {
    const state = emptyState({ 'ledger.*': 'allow', '*': 'deny' });
    expect(policySources(state, { ...seeded, policy: ['*'] })).toEqual({ 'ledger.*': 'config', '*': 'set' });
    expect(policySources(state, { policy: ['*'], shares: [], complete: false })).toEqual({
      'ledger.*': 'unknown',
      '*': 'set',
    });
  });

  test('the fields a change names, and the fields two shares differ in', () => {
    expect(changedFields({ weight: 2, callsPerSecond: null })).toEqual(['weight', 'limits.callsPerSecond']);
    expect(changedFields({ server: 'ledger', maxRunningCalls: 3 })).toEqual(['limits.servers.ledger.maxRunningCalls']);
    expect(
      changedShareFields(
        shares({ maxRunningCalls: 2 }),
        shares({ callsPerSecond: 5, servers: { ledger: { maxRunningCalls: 1 } } }),
      ),
    ).toEqual(['limits.callsPerSecond', 'limits.maxRunningCalls', 'limits.servers.ledger.maxRunningCalls']);
    expect(changedShareFields(defaultShares(), defaultShares())).toEqual([]);
  });

  test.each([
    ['weight', 2, 'oz0 tenant set t --weight 2'],
    ['maxPriority', 1, 'oz0 tenant set t --max-priority 1'],
    ['limits.maxRunningCalls', undefined, 'oz0 tenant set t --max-running none'],
    ['limits.servers.led-ger.callsPerSecond', 0.5, 'oz0 tenant set t --server led-ger --rate 0.5'],
  ])('the command that sets %s to %s', (field, value, command) => {
    expect(shareCommand('t', field, value)).toBe(command);
  });

  test.each([
    [undefined, true],
    [['weight', 'limits.servers.ledger.callsPerSecond'], true],
    [['limits.queued'], false],
    [['limits.servers.a.b.maxRunningCalls'], false],
    ['weight', false],
  ])('the fields a setShares Update names: %j valid %s (an older caller names none)', (fields, valid) => {
    expect(shareFieldsProblem(fields) === undefined).toBe(valid);
  });

  test.each([
    [seeded, true],
    [{ policy: ['*'], shares: ['weight'], complete: false }, true],
    [{ policy: [], complete: true }, false],
    [{ policy: [], shares: ['x'], complete: true }, false],
    [{ policy: [1], shares: [], complete: true }, false],
    [{ policy: [], shares: [], complete: 'yes' }, false],
  ])('origins %j are valid: %s, by the pure check and its schema alike', (origins, valid) => {
    expect(originsProblem(origins) === undefined).toBe(valid);
    expect(OriginsSchema.safeParse(origins).success).toBe(valid);
  });
});
