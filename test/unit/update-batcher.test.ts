/**
 * N4: a node's asks of one workflow go one Update at a time, the asks made meanwhile together in the next; an older
 * oz0's workflow, which refuses the batch by name, is asked one by one; what Temporal did not take is sent again.
 * (The Updates themselves, on a real Temporal server: test/integration/scale.test.ts.)
 */
import { WorkflowUpdateFailedError } from '@temporalio/client';
import { ApplicationFailure } from '@temporalio/common';
import { MAX_BATCH, UpdateBatcher, notTaken, refusedByName } from '../../common/update-batcher';

/** A workflow's side of the batches: what it was sent, in order, and how many were in flight at most. */
function recorder(
  opts: { refuse?: boolean; failFirst?: Error; wrong?: (n: number) => Error | undefined; singlesOnly?: boolean } = {},
) {
  const sent: Array<{ kind: 'many' | 'one'; items: number[] }> = [];
  let inFlight = 0;
  let most = 0;
  let failed = false;
  const enter = async () => {
    inFlight++;
    most = Math.max(most, inFlight);
    await new Promise((r) => setTimeout(r, 20));
    inFlight--;
  };
  const batcher = new UpdateBatcher<number, string>(
    'many',
    {
      many: async (_id, items) => {
        await enter();
        if (opts.refuse)
          throw new WorkflowUpdateFailedError(
            'update failed',
            ApplicationFailure.nonRetryable('No registered handler for update: many'),
          );
        if (opts.failFirst && !failed) {
          failed = true;
          throw opts.failFirst;
        }
        sent.push({ kind: 'many', items });
        return items.map((n) => opts.wrong?.(n) ?? `answer ${n}`);
      },
      one: async (_id, item) => {
        await enter();
        sent.push({ kind: 'one', items: [item] });
        return `alone ${item}`;
      },
    },
    opts.singlesOnly,
  );
  return { batcher, sent, most: () => most };
}

test('N4: asks made while a batch is on its way go together in the next; one Update in flight per workflow', async () => {
  const { batcher, sent, most } = recorder();
  const answers = await Promise.all(Array.from({ length: 50 }, (_, i) => batcher.submit('oz0-shares/acme', i)));
  expect(answers).toEqual(Array.from({ length: 50 }, (_, i) => `answer ${i}`));
  // The first ask went alone (nothing was on its way); the 49 made meanwhile went in one more.
  expect(sent.map((s) => s.items.length)).toEqual([1, 49]);
  expect(most()).toBe(1);
  expect(batcher.sent).toEqual({ updates: 2, asks: 50 });
  expect(batcher.pending).toBe(0);
});

test('N6: under upgrade.rollbackSafe no batch is ever sent: each ask goes alone, as the previous release takes it', async () => {
  const { batcher, sent, most } = recorder({ singlesOnly: true });
  const answers = await Promise.all(Array.from({ length: 10 }, (_, i) => batcher.submit('oz0-policy/acme', i)));
  expect(answers).toEqual(Array.from({ length: 10 }, (_, i) => `alone ${i}`));
  expect(sent.every((s) => s.kind === 'one')).toBe(true);
  // A few at a time, well under Temporal's 10 Updates in flight on one workflow.
  expect(most()).toBeLessThanOrEqual(3);
  // The control: the same asks without it go in batches.
  const batched = recorder();
  await Promise.all(Array.from({ length: 10 }, (_, i) => batched.batcher.submit('oz0-policy/acme', i)));
  expect(batched.sent.map((s) => s.kind)).toEqual(['many', 'many']);
});

test('N4: two workflows are asked side by side; a batch carries at most MAX_BATCH asks', async () => {
  const { batcher, sent, most } = recorder();
  const n = MAX_BATCH * 2 + 10;
  await Promise.all([
    ...Array.from({ length: n }, (_, i) => batcher.submit('a', i)),
    ...Array.from({ length: 5 }, (_, i) => batcher.submit('b', 1000 + i)),
  ]);
  expect(Math.max(...sent.map((s) => s.items.length))).toBe(MAX_BATCH);
  expect(sent.flatMap((s) => s.items).sort((x, y) => x - y)).toHaveLength(n + 5);
  // One per workflow: two in flight at most, never two of one workflow.
  expect(most()).toBe(2);
});

test("N4: an ask the workflow refuses fails alone; the batch's other asks are answered", async () => {
  const { batcher } = recorder({ wrong: (n) => (n === 3 ? new Error('id is 1-64 letters') : undefined) });
  const settled = await Promise.allSettled([1, 2, 3, 4].map((i) => batcher.submit('a', i)));
  expect(settled.map((s) => s.status)).toEqual(['fulfilled', 'fulfilled', 'rejected', 'fulfilled']);
  expect((settled[2] as PromiseRejectedResult).reason.message).toBe('id is 1-64 letters');
});

test('N4: an older oz0 refuses the batch by name: its asks go one by one, a few at a time, and every one is answered', async () => {
  const { batcher, sent, most } = recorder({ refuse: true });
  const answers = await Promise.all(Array.from({ length: 12 }, (_, i) => batcher.submit('a', i)));
  expect(answers).toEqual(Array.from({ length: 12 }, (_, i) => `alone ${i}`));
  expect(sent.every((s) => s.kind === 'one')).toBe(true);
  expect(most()).toBeLessThanOrEqual(3);
  // Control: the refusal is known by the handler's name only.
  const other = new WorkflowUpdateFailedError(
    'x',
    ApplicationFailure.nonRetryable('No registered handler for update: few'),
  );
  expect(refusedByName(other, 'many')).toBe(false);
  expect(refusedByName(new Error('No registered handler for update: many'), 'many')).toBe(false);
});

test('N4: a batch Temporal did not take (too many in flight) is sent again; any other failure fails its asks', async () => {
  const limit = new Error('limit on number of concurrent in-flight updates has been reached (10)');
  const taken = recorder({ failFirst: new Error('wrapped', { cause: limit }) });
  expect(await Promise.all([1, 2].map((i) => taken.batcher.submit('a', i)))).toEqual(['answer 1', 'answer 2']);
  expect(taken.batcher.retries).toBe(1);
  const lost = recorder({ failFirst: new Error('connection refused') });
  await expect(lost.batcher.submit('a', 1)).rejects.toThrow('connection refused');
  expect(notTaken(new Error('workflow update was aborted'))).toBe(true);
  expect(notTaken(new Error('Workflow Update failed'))).toBe(false);
});
