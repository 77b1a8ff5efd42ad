/**
 * The node's policy reads (C5): a caller never gets a read that started before it asked, and at most one read per
 * tenant is in flight — callers that come while one is on its way share the next. The reads here answer from a
 * stand-in for the policy workflow's query, so their timing can be held; tests/integration/policy proves the rest
 * against a real server.
 */
import type { Client } from '@temporalio/client';
import { MAX_WATCHES, PolicyGate } from '../../activities/policy/gate';
import { createLogger } from '../../common/logger';
import { emptyState } from '../../model/policy-rules';
import type { TenantState } from '../../model/schemas';

/** A client whose policy queries wait until released; each records when it started and for which workflow. */
function heldClient() {
  const reads: Array<{ id: string; at: number; release: (s: TenantState) => void }> = [];
  const client = {
    withDeadline: <T>(_deadline: number, fn: () => Promise<T>) => fn(),
    workflow: {
      getHandle: (id: string) => ({
        query: () => new Promise<TenantState>((release) => reads.push({ id, at: Date.now(), release })),
      }),
    },
  } as unknown as Client;
  return { client, reads };
}

const tick = () => new Promise((r) => setImmediate(r));

test('callers that come while a read is in flight do not get it: they share the one read that starts after it', async () => {
  const { client, reads } = heldClient();
  const gate = new PolicyGate(
    { client, taskQueue: 'p', seeds: {}, shareSeeds: {} },
    createLogger({ level: 'silent' }),
    60_000,
  );
  try {
    const first = gate.read('t', 0);
    await tick();
    expect(reads.map((r) => r.id)).toEqual(['oz0-policy/t', 'oz0-policy/*']);
    const askedAt = Date.now();
    // 50 calls ask while the first read is on its way, and see the switch thrown meanwhile.
    const later = Array.from({ length: 50 }, () => gate.read('t', 0));
    await tick();
    expect(reads).toHaveLength(2);
    for (const r of reads.splice(0)) r.release(emptyState());
    expect((await first).state.kills).toEqual([]);
    await tick();
    await tick();
    expect(reads).toHaveLength(2);
    expect(reads.every((r) => r.at >= askedAt)).toBe(true);
    for (const r of reads.splice(0)) r.release({ ...emptyState(), kills: ['x.y'] });
    for (const answer of await Promise.all(later)) expect(answer.state.kills).toEqual(['x.y']);
  } finally {
    gate.close();
  }
});

test('a failed read fails its callers; the next caller starts a new one', async () => {
  let queries = 0;
  const failing = {
    withDeadline: <T>(_deadline: number, fn: () => Promise<T>) => fn(),
    workflow: {
      getHandle: () => ({
        query: () => (queries++, Promise.reject(new Error('no worker'))),
        // The node looks at what stands under the id when its query fails: a policy, not answering.
        describe: async () => ({ type: 'tenantPolicy', status: { name: 'RUNNING' } }),
      }),
    },
  } as unknown as Client;
  const gate = new PolicyGate(
    { client: failing, taskQueue: 'p', seeds: {}, shareSeeds: {} },
    createLogger({ level: 'silent' }),
    60_000,
  );
  try {
    await expect(gate.read('t', 0)).rejects.toThrow('no worker');
    await expect(gate.read('t', 0)).rejects.toThrow('no worker');
    expect(queries).toBe(4);
  } finally {
    gate.close();
  }
});

test('a node watches at most MAX_WATCHES tenants (and always the all-tenants switches); the rest are read per call', async () => {
  const watched = new Set<string>();
  // Each watch starts by describing its tenant's workflow: here that never answers, so no watch catches up.
  const client = {
    withDeadline: <T>(_deadline: number, fn: () => Promise<T>) => fn(),
    workflow: {
      getHandle: (id: string) => ({
        describe: () => (watched.add(id), new Promise(() => {})),
        query: async () => emptyState(),
      }),
    },
  } as unknown as Client;
  const gate = new PolicyGate(
    { client, taskQueue: 'p', seeds: {}, shareSeeds: {} },
    createLogger({ level: 'silent' }),
    60_000,
    true,
  );
  try {
    for (let i = 0; i < MAX_WATCHES + 20; i++) {
      const read = await gate.read(`t${i}`, 0, true);
      // Not caught up: the answer is a read of its own.
      expect(read.watched).toBe(false);
    }
    await tick();
    expect(watched.has('oz0-policy/*')).toBe(true);
    expect(watched.size).toBe(MAX_WATCHES);
    expect(watched.has(`oz0-policy/t${MAX_WATCHES + 5}`)).toBe(false);
  } finally {
    gate.close();
  }
});
