/**
 * A4/A5 with real nodes: a call that waits for a person holds nothing on a node — the wait is the job's own, in
 * Temporal. A node killed (kill -9, with its servers) while a call waits loses nothing: the yes given afterwards lets
 * exactly one call through, on another node. Real `oz0 worker` processes against one dev server; the ledger's own log
 * says what it received.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { answerCall } from '../../client/calls';
import { callsOf, waitingCallsQuery } from '../../workflows/definitions';
import type { JobTrace } from '../../workflows/definitions';
import { eventually, example, killTree, startTemporal, startWorker, tmpDir, uniqueId } from '../helpers/temporal';
import type { TestTemporal } from '../helpers/temporal';

let temporal: TestTemporal;
const workers: ChildProcess[] = [];

beforeAll(async () => {
  temporal = await startTemporal();
});
afterAll(async () => {
  for (const w of workers) if (w.exitCode === null) killTree(w.pid!);
  await temporal?.close();
});

test('A4/A5/T4: a node killed while a call waits for a person; the yes given afterwards lets exactly one call through, on another node', async () => {
  const dir = tmpDir();
  const received = path.join(dir, 'received.jsonl');
  const tenant = uniqueId('t');
  const taskQueue = uniqueId('oz0-test');
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      temporal: { address: temporal.server.address, namespace: 'default', taskQueue },
      servers: {
        ledger: {
          command: 'node',
          args: [example('ledger')],
          env: { OZ0_RECEIVED_LOG: received, LEDGER_FILE: path.join(dir, 'ledger.jsonl') },
        },
      },
      tenants: { [tenant]: { policy: { 'ledger.refund': 'confirm' } } },
      node: { stateDir: path.join(dir, 'state'), heartbeatTimeoutSeconds: 5 },
    }),
  );
  const refunds = () => readReceived(received).filter((r) => r.tool === 'refund');
  const a = await startWorker(file, 'node-a', workers);
  const handle = await temporal.client.workflow.start('job', {
    taskQueue,
    workflowId: uniqueId('job'),
    args: [{ tenant, steps: [{ call: 'ledger.refund', args: { order_id: 'o-1', amount: 5 } }] }],
  });
  await eventually(
    async () => (await handle.query(waitingCallsQuery)).find((c) => c.activityId === 'c1'),
    30_000,
    'the refund to wait for a person',
  );
  const b = await startWorker(file, 'node-b', workers);
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
