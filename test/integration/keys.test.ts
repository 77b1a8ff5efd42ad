/**
 * K1, K2 and T2 against a real Temporal dev server and real example servers over stdio: what the servers
 * received, checked against what Temporal's history says.
 */
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { argsDigest } from '../../model/keys';
import { example, runJob, tmpDir, useTemporal } from '../helpers/temporal';
import type { JobSpec } from '../../model/schemas';
import { callsOf } from '../../model/job';

const temporal = useTemporal();

function servers(dir: string) {
  const log = path.join(dir, 'received.jsonl');
  const env = {
    OZ0_RECEIVED_LOG: log,
    LEDGER_FILE: path.join(dir, 'ledger.db'),
    READER_STATE: path.join(dir, 'seen.json'),
  };
  return {
    log,
    config: {
      servers: {
        ledger: { command: 'node', args: [example('ledger')], env },
        reader: { command: 'node', args: [example('reader')], env },
      },
      tools: { '*': { timeoutSeconds: 30, maxAttempts: 3 } },
    },
  };
}

test('K1: every attempt of one call carries the same key (a read-only call whose first attempt crashes its server)', async () => {
  const dir = tmpDir();
  const { log, config } = servers(dir);
  const { trace, handle } = await runJob(temporal, temporal.config(config), {
    tenant: 'acme',
    steps: [{ call: 'reader.read_pages', args: { pages: 2, page_ms: 50, crash_first_attempt: true } }],
  });
  const received = readReceived(log).filter((r) => r.tool === 'read_pages' && r.args);
  expect(received).toHaveLength(2);
  expect(received[0].key).toBe(`${handle.workflowId}/c1`);
  expect(received[1].key).toBe(received[0].key);
  // The plugin server died with the first attempt and was started again for the second.
  expect(received[0].pid).not.toBe(received[1].pid);
  expect(callsOf(trace)[0].result.isError).toBe(false);
  expect(callsOf(trace)[0].attempts.map((a) => [a.attempt, a.outcome])).toEqual([
    [1, 'failed'],
    [2, 'ok'],
  ]);
});

test('K2: every call gets <job>/<activityId>, distinct, as Temporal history shows them', async () => {
  const dir = tmpDir();
  const { log, config } = servers(dir);
  const { trace, handle } = await runJob(temporal, temporal.config(config), {
    tenant: 'acme',
    steps: [
      { call: 'ledger.charge', args: { order_id: 'o-1', amount: 500 } },
      { call: 'ledger.charge', args: { order_id: 'o-1', amount: 500 } },
      { call: 'reader.echo', args: { text: 'hi' } },
    ],
  });
  const history = await handle.fetchHistory();
  const activityIds = (history.events ?? [])
    .map((e) => e.activityTaskScheduledEventAttributes)
    .filter((a) => a?.activityType?.name === 'callTool')
    .map((a) => a!.activityId);
  const keys = readReceived(log)
    .filter((r) => r.key)
    .map((r) => r.key);
  expect(keys).toEqual(activityIds.map((id) => `${handle.workflowId}/${id}`));
  expect(new Set(keys).size).toBe(3);
  expect(callsOf(trace).map((s) => s.key)).toEqual(keys);
  // Two charges with the same arguments but different keys: two charges.
  expect(callsOf(trace)[0].result.structuredContent).not.toEqual(callsOf(trace)[1].result.structuredContent);
});

test('T2/K2: after continue-as-new the keys carry r<m>/', async () => {
  const dir = tmpDir();
  const { log, config } = servers(dir);
  const spec: JobSpec = {
    tenant: 'acme',
    steps: [1, 2, 3, 4, 5].map((i) => ({ call: 'reader.echo', args: { text: `t${i}` } })),
  };
  const { trace, handle } = await runJob(
    temporal,
    temporal.config({ ...config, jobs: { continueAsNewAfterCalls: 2 } }),
    spec,
  );
  const id = handle.workflowId;
  const keys = readReceived(log).map((r) => r.key);
  expect(keys).toEqual([`${id}/c1`, `${id}/c2`, `${id}/r1/c1`, `${id}/r1/c2`, `${id}/r2/c1`]);
  expect(trace.run).toBe(2);
  expect(trace.calls).toBe(5);
  expect(callsOf(trace).map((s) => s.key)).toEqual(keys);
});

test('K6: a session never spans a continue-as-new: the job continues before it and after it, never inside', async () => {
  const dir = tmpDir();
  const { log, config } = servers(dir);
  const set = (status: string) => ({ call: 'ledger.set_status', args: { id: 't-6', status } });
  const { trace, handle } = await runJob(
    temporal,
    temporal.config({ ...config, jobs: { continueAsNewAfterCalls: 1 } }),
    {
      tenant: 'acme',
      steps: [
        { call: 'reader.echo', args: { text: 'before' } },
        { session: [set('open'), set('closed'), set('open')] },
        { call: 'reader.echo', args: { text: 'after' } },
      ],
    },
  );
  const id = handle.workflowId;
  const open = argsDigest({ id: 't-6', status: 'open' });
  const closed = argsDigest({ id: 't-6', status: 'closed' });
  // Three session calls in one run (r1), though the job continues as new after every call outside a session.
  expect(readReceived(log).map((r) => r.key)).toEqual([
    `${id}/c1`,
    `${id}/r1/s1/set_status#${open}/1`,
    `${id}/r1/s1/set_status#${closed}/1`,
    `${id}/r1/s1/set_status#${open}/2`,
    `${id}/r2/c1`,
  ]);
  expect(trace.run).toBe(2);
});

test('P1: a call that may be made again asks for progress and keeps the last one with its attempt; others do not ask', async () => {
  const dir = tmpDir();
  const { log, config } = servers(dir);
  const { trace } = await runJob(temporal, temporal.config(config), {
    tenant: 'acme',
    steps: [
      { call: 'reader.read_pages', args: { pages: 3, page_ms: 30 } },
      { call: 'reader.sleep', args: { ms: 10 } },
    ],
  });
  const [read, sleep] = ['read_pages', 'sleep'].map((tool) => readReceived(log).find((r) => r.tool === tool && r.args));
  expect(typeof read?.progressToken).toBe('string');
  expect(sleep?.progressToken).toBeUndefined();
  // The last progress, even when it came just before the answer.
  expect(callsOf(trace)[0].attempts).toEqual([{ attempt: 1, outcome: 'ok', progress: { progress: 3, total: 3 } }]);
  expect(callsOf(trace)[1].attempts).toEqual([{ attempt: 1, outcome: 'ok' }]);
});

test('K3/K4/K5: in a session, an idempotent function gets content keys …/1, …/1, …/2; other calls keep K2 keys', async () => {
  const dir = tmpDir();
  const { log, config } = servers(dir);
  const { handle } = await runJob(temporal, temporal.config(config), {
    tenant: 'acme',
    steps: [
      {
        session: [
          { call: 'ledger.set_status', args: { id: 't-1', status: 'open' } },
          { call: 'reader.echo', args: { text: 'between' } },
          { call: 'ledger.set_status', args: { id: 't-1', status: 'closed' } },
          { call: 'ledger.set_status', args: { status: 'open', id: 't-1' } },
        ],
      },
    ],
  });
  const id = handle.workflowId;
  const keys = readReceived(log)
    .filter((r) => r.args)
    .map((r) => r.key as string);
  const open = argsDigest({ id: 't-1', status: 'open' });
  const closed = argsDigest({ id: 't-1', status: 'closed' });
  expect(keys).toEqual([
    `${id}/s1/set_status#${open}/1`,
    `${id}/c2`,
    `${id}/s1/set_status#${closed}/1`,
    `${id}/s1/set_status#${open}/2`,
  ]);
});
