/**
 * F3: the counting behind a tenant's caps and rates (model/limiter.ts), driven as its workflow drives it: nodes take
 * and give permits, calls wait in line and keep their places, a rate gives starts 1/rate apart.
 */
import {
  GRANT_TTL_MS,
  Limiter,
  PACE_LEAD_MS,
  PACE_MS,
  emptyLimiter,
  giveProblem,
  takeProblem,
} from '../../model/limiter';
import type { TakeRequest, TakeResult } from '../../model/limiter';
import type { Limits } from '../../model/shares';

const T0 = 1_000_000;

function limiter(limits: Limits, version = 1): Limiter {
  const l = new Limiter(emptyLimiter('acme'));
  l.adopt({ version, limits });
  return l;
}

let asks = 0;

function ask(key: string, opts: { holder?: string; server?: string; priority?: number; limits?: Limits } = {}) {
  const server = opts.server ?? 'ledger';
  return {
    id: `ask-${key}-${++asks}`,
    holder: opts.holder ?? 'node-a',
    ttlMs: 30_000,
    settings: { version: 1, limits: opts.limits ?? {} },
    call: { jobId: `job-${key}`, key, tool: `${server}.charge`, server, priority: opts.priority ?? 3 },
  } satisfies TakeRequest;
}

const ok = (r: TakeResult) => r.ok;
const position = (r: TakeResult) => (r.ok ? 0 : r.position);

describe('F3: a cap on running calls', () => {
  test('permits up to the cap, then a line in order of arrival; every node counts alike', () => {
    const l = limiter({ maxRunningCalls: 2 });
    expect(ok(l.take(ask('a'), T0))).toBe(true);
    expect(ok(l.take(ask('b', { holder: 'node-b' }), T0))).toBe(true);
    expect(l.running('*')).toBe(2);
    const c = l.take(ask('c'), T0);
    expect(c).toMatchObject({ ok: false, position: 1, why: "acme's cap of 2 running calls" });
    expect(position(l.take(ask('d', { holder: 'node-b' }), T0))).toBe(2);
    expect(l.waiting()).toEqual({ '*': 2 });
  });

  test('a call asking again keeps its place; one that came later never passes it', () => {
    const l = limiter({ maxRunningCalls: 1 });
    l.take(ask('a'), T0);
    l.take(ask('b'), T0);
    l.take(ask('c'), T0);
    expect(position(l.take(ask('c'), T0 + 10))).toBe(2);
    expect(position(l.take(ask('b'), T0 + 20))).toBe(1);
    // A permit back: the first in line gets it, not a newcomer that asks in the same breath.
    l.give({ holder: 'node-a', caps: { '*': 1 }, ttlMs: 30_000 }, T0 + 30);
    expect(position(l.take(ask('e'), T0 + 30))).toBe(3);
    expect(l.pump(T0 + 30).map((w) => w.key)).toEqual(['b']);
  });

  test('a grant is claimed by the node that runs the call, and counts until then', () => {
    const l = limiter({ maxRunningCalls: 1 });
    l.take(ask('a'), T0);
    l.take(ask('b'), T0);
    l.give({ holder: 'node-a', caps: { '*': 1 }, ttlMs: 30_000 }, T0 + 1);
    expect(l.pump(T0 + 1).map((w) => w.key)).toEqual(['b']);
    // Held for b: nobody else takes it meanwhile.
    expect(l.running('*')).toBe(1);
    expect(ok(l.take(ask('c', { holder: 'node-b' }), T0 + 2))).toBe(false);
    expect(l.take(ask('b', { holder: 'node-b' }), T0 + 3)).toMatchObject({ ok: true, caps: ['*'] });
    expect(l.state.holders['node-b'].caps['*']).toBe(1);
    expect(l.running('*')).toBe(1);
  });

  test('F4: the line is in order of priority, then arrival', () => {
    const l = limiter({ maxRunningCalls: 1 });
    l.take(ask('a'), T0);
    l.take(ask('scripted', { priority: 3 }), T0);
    expect(position(l.take(ask('agent', { priority: 2 }), T0 + 1))).toBe(1);
    l.give({ holder: 'node-a', caps: { '*': 1 }, ttlMs: 30_000 }, T0 + 2);
    expect(l.pump(T0 + 2).map((w) => w.key)).toEqual(['agent']);
  });

  test("a server's cap holds its calls; the tenant's calls of another server pass them", () => {
    const l = limiter({ servers: { search: { maxRunningCalls: 1 } } });
    const limits = l.state.settings.limits;
    l.take(ask('s1', { server: 'search', limits }), T0);
    expect(l.take(ask('s2', { server: 'search', limits }), T0)).toMatchObject({
      ok: false,
      why: "acme's cap of 1 running calls of search",
    });
    expect(ok(l.take(ask('l1', { server: 'ledger', limits }), T0))).toBe(true);
  });

  test('a call held back by its own cap holds back those behind it that need the same scope, no others', () => {
    const l = limiter({ maxRunningCalls: 3, servers: { search: { maxRunningCalls: 1 } } });
    const limits = l.state.settings.limits;
    l.take(ask('s1', { server: 'search', limits }), T0);
    l.take(ask('l1', { limits }), T0);
    l.take(ask('l2', { limits }), T0);
    // The tenant's cap is full: both wait, the search call first.
    l.take(ask('s2', { server: 'search', limits }), T0);
    l.take(ask('l3', { limits }), T0);
    // One ledger call ends: s2 still waits for search, and holds the tenant's scope for its place; l3 waits behind it.
    l.give({ holder: 'node-a', caps: { '*': 1 }, ttlMs: 30_000 }, T0 + 1);
    expect(l.pump(T0 + 1)).toEqual([]);
    // The search call ends too: s2's turn, then l3 when the next frees.
    l.give({ holder: 'node-a', caps: { '*': 1, 'server:search': 1 }, ttlMs: 30_000 }, T0 + 2);
    expect(l.pump(T0 + 2).map((w) => w.key)).toEqual(['s2', 'l3']);
  });

  test('a node that stops renewing loses its permits after its time; a grant nobody claims goes back', () => {
    const l = limiter({ maxRunningCalls: 1 });
    l.take(ask('a'), T0);
    l.take(ask('b'), T0);
    expect(l.pump(T0 + 29_000)).toEqual([]);
    expect(l.pump(T0 + 30_001).map((w) => w.key)).toEqual(['b']);
    expect(l.running('*')).toBe(1);
    l.pump(T0 + 30_002 + GRANT_TTL_MS);
    expect(l.running('*')).toBe(0);
  });

  test('a call withdrawn leaves the line, and its grant goes back', () => {
    const l = limiter({ maxRunningCalls: 1 });
    l.take(ask('a'), T0);
    l.take(ask('b'), T0);
    l.take(ask('c'), T0);
    l.withdraw({ jobId: 'job-b', key: 'b' });
    expect(position(l.take(ask('c'), T0))).toBe(1);
    l.give({ holder: 'node-a', caps: { '*': 1 }, ttlMs: 30_000 }, T0);
    l.pump(T0);
    l.withdraw({ jobId: 'job-c', key: 'c' });
    expect(l.running('*')).toBe(0);
  });

  test('C5: a kill switch takes the calls it covers out of line, and no others', () => {
    const l = limiter({ maxRunningCalls: 1 });
    l.take(ask('a'), T0);
    l.take(ask('b'), T0);
    l.take(ask('s', { server: 'search' }), T0);
    expect(l.wake(['ledger.*']).map((w) => w.key)).toEqual(['b']);
    expect(l.state.queue.map((w) => w.key)).toEqual(['s']);
  });

  test('a give is relative: two of one node that cross never undo a take between them', () => {
    const l = limiter({ maxRunningCalls: 3 });
    l.take(ask('a'), T0);
    l.take(ask('b'), T0);
    l.give({ holder: 'node-a', caps: { '*': 1 }, ttlMs: 30_000 }, T0);
    l.take(ask('c'), T0);
    l.give({ holder: 'node-a', caps: { '*': 1 }, ttlMs: 30_000 }, T0);
    expect(l.running('*')).toBe(1);
    l.give({ holder: 'node-a', caps: { '*': 5 }, ttlMs: 30_000 }, T0);
    expect(l.running('*')).toBe(0);
  });

  test('a give sent again (its answer never heard) counts once; an ask never heard answered hands its permits back', () => {
    const l = limiter({ maxRunningCalls: 3 });
    l.take(ask('a'), T0);
    l.take(ask('b'), T0);
    const give = { holder: 'node-a', caps: { '*': 1 }, ttlMs: 30_000, id: 'give-1' };
    l.give(give, T0);
    l.give(give, T0 + 1);
    expect(l.running('*')).toBe(1);
    // The node's ask timed out, yet the limiter had given it a permit: its next give hands it back by the ask's id.
    const lost = ask('c');
    expect(ok(l.take(lost, T0 + 2))).toBe(true);
    expect(l.running('*')).toBe(2);
    l.give({ holder: 'node-a', caps: {}, ttlMs: 30_000, id: 'give-2', abandoned: [lost.id, 'never-seen'] }, T0 + 3);
    expect(l.running('*')).toBe(1);
    // Handed back once, however often it is said.
    l.give({ holder: 'node-a', caps: {}, ttlMs: 30_000, id: 'give-3', abandoned: [lost.id] }, T0 + 4);
    expect(l.running('*')).toBe(1);
  });

  test('F5: a newer policy version changes the limits, an older one does not; a raised cap lets the line in', () => {
    const l = limiter({ maxRunningCalls: 1 }, 4);
    l.take(ask('a'), T0);
    l.take(ask('b'), T0);
    l.adopt({ version: 3, limits: { maxRunningCalls: 9 } });
    expect(l.pump(T0)).toEqual([]);
    l.adopt({ version: 5, limits: { maxRunningCalls: 2 } });
    expect(l.pump(T0).map((w) => w.key)).toEqual(['b']);
    expect(l.status()).toEqual({
      version: 5,
      scopes: [{ scope: '*', running: 2, waiting: 0 }],
      holders: 1,
      queue: 0,
    });
  });
});

describe('F3: a rate of calls', () => {
  test(`starts 1/rate apart, the first ${PACE_LEAD_MS} ms off; past ${PACE_MS} ms off, a call waits in line`, () => {
    const l = limiter({ callsPerSecond: 5 });
    const ats = [] as number[];
    for (const key of ['a', 'b', 'c', 'd', 'e']) {
      const r = l.take(ask(key), T0);
      expect(r.ok).toBe(true);
      if (r.ok) ats.push(r.at!);
    }
    expect(ats).toEqual([0, 200, 400, 600, 800].map((d) => T0 + PACE_LEAD_MS + d));
    // The next would start 1,100 ms off: it waits; its turn comes with the first message once its start is in reach.
    expect(l.take(ask('f'), T0)).toMatchObject({ ok: false, why: "acme's rate of 5 calls a second" });
    const inReach = T0 + PACE_LEAD_MS + 1000 - PACE_MS;
    expect(l.pump(inReach - 1)).toEqual([]);
    expect(l.pump(inReach).map((w) => w.key)).toEqual(['f']);
    expect(l.take(ask('f'), inReach + 50)).toMatchObject({ ok: true, at: T0 + PACE_LEAD_MS + 1000 });
  });

  test('a cap and a rate together: a call needs both', () => {
    const l = limiter({ maxRunningCalls: 1, callsPerSecond: 100 });
    expect(ok(l.take(ask('a'), T0))).toBe(true);
    expect(l.take(ask('b'), T0)).toMatchObject({
      ok: false,
      why: "acme's cap of 1 running calls and rate of 100 calls a second",
    });
  });
});

describe('Bad input: what reaches the limiter is checked', () => {
  test.each([
    ['no holder', { ...ask('a'), holder: '' }, 'holder'],
    ['a short ttl', { ...ask('a'), ttlMs: 10 }, 'ttlMs'],
    ['bad limits', { ...ask('a'), settings: { version: 1, limits: { maxRunningCalls: 0 } } }, 'maxRunningCalls'],
    ['a tool of another server', { ...ask('a'), call: { ...ask('a').call, tool: 'x.y' } }, 'tool'],
    ['a priority of 9', { ...ask('a'), call: { ...ask('a').call, priority: 9 } }, 'priority'],
  ])('take: %s is refused', (_what, req, word) => {
    expect(takeProblem(req)).toContain(word);
  });

  test('a well-formed ask and give pass; a negative give does not', () => {
    expect(takeProblem(ask('a'))).toBeUndefined();
    expect(giveProblem({ holder: 'node-a', caps: { '*': 1 }, ttlMs: 30_000, id: 'g-1' })).toBeUndefined();
    expect(giveProblem({ holder: 'node-a', caps: { '*': -1 }, ttlMs: 30_000 })).toContain('caps');
    expect(giveProblem({ holder: 'node-a', caps: {}, ttlMs: 30_000, abandoned: ['a b'] })).toContain('abandoned');
  });
});
