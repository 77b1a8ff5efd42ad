/**
 * A4/A5 with real nodes: a call that waits for a person holds nothing on a node — the wait is the job's own, in
 * Temporal. A node killed (kill -9, with its servers) while a call waits loses nothing: the yes given afterwards lets
 * exactly one call through, on another node. And a yes goes with its call: a node lost in the middle of the approved
 * call leaves its retry, on another node, to run under the same yes and key. Real `oz0 worker` processes against one
 * dev server; the servers' own logs say what they received.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { answerCall } from '../../client/calls';
import { callsOf } from '../../model/job';
import { waitingCallsQuery } from '../../model/messages';
import type { JobTrace } from '../../model/job';
import { eventually, example, fixture, killTree, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

/** A config file for worker processes: the ledger and the probe, their logs, and `policy` seeding the tenant. */
function setup(policy: Record<string, string>) {
  const dir = tmpDir();
  const received = path.join(dir, 'received.jsonl');
  const probeLog = path.join(dir, 'probe.jsonl');
  const tenant = uniqueId('t');
  const taskQueue = uniqueId('oz0-test');
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      temporal: { address: temporal.server.address, namespace: temporal.server.namespace, taskQueue },
      servers: {
        ledger: {
          command: 'node',
          args: [example('ledger')],
          env: { OZ0_RECEIVED_LOG: received, LEDGER_FILE: path.join(dir, 'ledger.jsonl') },
        },
        probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: probeLog } },
      },
      tools: { 'probe.*': { timeoutSeconds: 60, maxAttempts: 3 } },
      tenants: { [tenant]: { policy } },
      node: { stateDir: path.join(dir, 'state'), heartbeatTimeoutSeconds: 5 },
    }),
  );
  const start = (call: string, args: Record<string, unknown>) =>
    temporal.client.workflow.start('job', {
      taskQueue,
      workflowId: uniqueId('job'),
      args: [{ tenant, steps: [{ call, args }] }],
    });
  return { file, start, refunds: () => readReceived(received).filter((r) => r.tool === 'refund'), probeLog };
}

test('A4/A5/T4: a node killed while a call waits for a person; the yes given afterwards lets exactly one call through, on another node', async () => {
  const { file, start, refunds } = setup({ 'ledger.refund': 'confirm' });
  const a = await temporal.startWorker(file, 'node-a');
  const handle = await start('ledger.refund', { order_id: 'o-1', amount: 5 });
  await eventually(
    async () => (await handle.query(waitingCallsQuery)).find((c) => c.activityId === 'c1'),
    30_000,
    'the refund to wait for a person',
  );
  const b = await temporal.startWorker(file, 'node-b');
  // The machine is lost: node A and every process it started (its ledger) die at once.
  killTree(a.proc.pid!);
  await a.exited;
  expect(refunds()).toHaveLength(0);
  const answered = await answerCall(temporal.client, handle.workflowId, { approve: true, by: 'heidi' });
  expect(answered).toMatchObject({ activityId: 'c1', key: `${handle.workflowId}/c1`, approved: true });
  const trace: JobTrace = await handle.result();
  expect(callsOf(trace)[0]).toMatchObject({
    node: 'node-b',
    attempts: [{ attempt: 1, outcome: 'ok' }],
    question: { answer: { approved: true, by: 'heidi' } },
  });
  expect(refunds().map((r) => r.key)).toEqual([`${handle.workflowId}/c1`]);
  b.proc.kill('SIGTERM');
  expect(await b.exited).toBe(0);
}, 120_000);

test('A5/T4: a yes covers its call’s retry after its node is lost mid-call: the next attempt, on another node, is not asked again', async () => {
  const { file, start, probeLog } = setup({ 'probe.hang_read': 'confirm' });
  const a = await temporal.startWorker(file, 'node-a');
  // Long enough that the call is still running on node A when node B has started (slow on a loaded machine).
  const handle = await start('probe.hang_read', { ms: 15_000 });
  await eventually(async () => (await handle.query(waitingCallsQuery))[0], 30_000, 'the call to wait for a person');
  await answerCall(temporal.client, handle.workflowId, { approve: true, by: 'ivan' });
  const started = () => readReceived(probeLog).filter((r) => r.event === 'start');
  await eventually(() => (started().length === 1 ? true : undefined), 30_000, 'the approved call to start');
  const b = await temporal.startWorker(file, 'node-b');
  killTree(a.proc.pid!);
  await a.exited;
  const trace: JobTrace = await handle.result();
  const step = callsOf(trace)[0];
  expect(step.node).toBe('node-b');
  expect(step.attempts.map((x) => x.outcome)).toEqual(['lost', 'ok']);
  expect(step.question?.answer).toMatchObject({ approved: true, by: 'ivan' });
  // Both attempts reached the server under the call's one key; nobody was asked twice.
  expect(started().map((r) => r.key)).toEqual([`${handle.workflowId}/c1`, `${handle.workflowId}/c1`]);
  b.proc.kill('SIGTERM');
  expect(await b.exited).toBe(0);
}, 120_000);
