/**
 * H8 (and T4) on real worker processes: the node running a harness session is killed (kill -9 of the node, its
 * harness and its servers) while the harness is mid-way. The harness starts again on the other node with the same
 * session number, the next session run and the same input; its calls get keys counted afresh in that run, so the
 * same calls in the same order get the same keys, and the ledger (shared by both nodes) makes every write once.
 * A lost run that made a call that may not be made again stops the job, naming the call and its key.
 */
import fs from 'node:fs';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { readKeyStore } from '../../plugin';
import { openSession } from '../../client/sessions';
import type { LiveSession } from '../../client/sessions';
import { argsDigest } from '../../model/keys';
import { DIE_AFTER_EARLY_ANSWER } from '../../activities/call/durable';
import { timestampMs } from '../../common/time';
import { isSessionTrace } from '../../model/job';
import type { JobTrace, SessionTrace } from '../../model/job';
import {
  ROOT,
  descendants,
  eventually,
  example,
  fixture,
  killTree,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';

const temporal = useTemporal();

function setup(nodeExtra: Record<string, unknown> = {}) {
  const dir = tmpDir();
  const log = path.join(dir, 'received.jsonl');
  const ledger = path.join(dir, 'ledger.db');
  const env = { LEDGER_FILE: ledger, OZ0_RECEIVED_LOG: log };
  const servers = {
    ledger: { command: 'node', args: [example('ledger')], env },
    reader: { command: 'node', args: [example('reader')], env },
  };
  const harnesses = {
    probe: {
      command: 'node',
      args: [fixture('harness.js')],
      env: { NODE_PATH: path.join(ROOT, 'node_modules') },
      tools: ['ledger.*', 'reader.*'],
      timeoutSeconds: 120,
      // I2: what it loads (the MCP SDK); this config lives in a folder of its own, so the path is absolute.
      sandbox: { read: [path.join(ROOT, 'node_modules')] },
    },
  };
  const node = { heartbeatTimeoutSeconds: 4 };
  const config = temporal.config({ servers, node });
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      temporal: config.temporal,
      servers,
      harnesses,
      node: { ...node, ...nodeExtra, stateDir: path.join(dir, 'state') },
    }),
  );
  return { file, log, ledger, taskQueue: config.temporal.taskQueue };
}

function sessionOf(trace: JobTrace): SessionTrace {
  return trace.steps.find(isSessionTrace)!;
}

/** The harness's writes: idempotent keyed ones (K3), two with the same arguments, a pause between each. */
function writes(order: string) {
  const set = (status: string) => ({ call: 'ledger.set_status', args: { id: order, status } });
  return [
    set('open'),
    { sleep: 500 },
    { call: 'ledger.charge', args: { order_id: order, amount: 5 } },
    { sleep: 500 },
    set('closed'),
    { sleep: 500 },
    set('open'),
    { sleep: 500 },
    { call: 'ledger.refund', args: { order_id: order, amount: 5 } },
  ];
}

test.each([[1], [2], [4]])(
  'H8: the harness’s node is lost after %d writes: the harness starts again on the other node (run 2, same input), its calls get the same keys, every write is made once',
  async (after) => {
    const { file, log, ledger, taskQueue } = setup();
    const [a, b] = await temporal.startWorkers(file, 'node-a', 'node-b');
    const order = uniqueId('o');
    const input = { steps: writes(order) };
    const handle = await temporal.client.workflow.start('job', {
      taskQueue,
      workflowId: uniqueId('lost'),
      args: [{ tenant: 'acme', steps: [{ session: { harness: 'probe', input } }] }],
    });
    const jobId = handle.workflowId;
    const mine = () =>
      readReceived(log).filter((r) => typeof r.key === 'string' && (r.key as string).startsWith(`${jobId}/`));
    await eventually(() => (mine().length >= after ? true : undefined), 60_000, `${after} writes`);
    // The node whose servers got the calls runs the session (its harness and servers are its descendants).
    const first = mine()[0];
    const victim = [a, b].find((w) => descendants(w.proc.pid!).includes(first.pid as number))!;
    const survivor = victim === a ? b : a;
    const victimPids = new Set(descendants(victim.proc.pid!));
    killTree(victim.proc.pid!);

    const trace: JobTrace = await handle.result();
    const session = sessionOf(trace);
    expect(session.runs.map((r) => [r.run, r.node])).toEqual([
      [1, victim.name],
      [2, survivor.name],
    ]);
    expect(session.runs[0].ended).toMatch(/^lost: /);
    expect(session.status).toBe('ended');
    expect(session.result?.isError).toBe(false);
    // The same input reached run 2, which made the calls again from the start.
    const seen = session.result!.structuredContent as { sessionRun: string; input: unknown; calls: { key: string }[] };
    expect(seen.sessionRun).toBe('2');
    expect(seen.input).toEqual(input);
    // What the servers received: run 1's keys are the first keys of run 2, in the same order.
    const before = [
      ...new Set(
        mine()
          .filter((r) => victimPids.has(r.pid as number))
          .map((r) => r.key as string),
      ),
    ];
    const fresh = [
      ...new Set(
        mine()
          .filter((r) => !victimPids.has(r.pid as number))
          .map((r) => r.key as string),
      ),
    ];
    expect(fresh.slice(0, before.length)).toEqual(before);
    expect(fresh).toHaveLength(5);
    expect(seen.calls.map((c) => c.key)).toEqual(fresh);
    // The ledger, shared by both nodes: each key written once, five writes in all.
    const records = readKeyStore(ledger).filter((r) => r.key.startsWith(`${jobId}/`));
    expect(records.map((r) => r.key).sort()).toEqual([...fresh].sort());
    expect(records.filter((r) => r.tool === 'charge')).toHaveLength(1);
    survivor.proc.kill('SIGTERM');
    await survivor.exited;
  },
  180_000,
);

test('H4/H8 (issue 26.3): the harness hears its call once its result is durable; its node killed right then, before the workflow task that completes the Update, nothing is answered or done twice', async () => {
  // Unisolated, so the harness outlives its node and notes the answer it read; the node dies (SIGKILL, by its own
  // hand: OZ0_TEST_FAULT) as soon as it has answered the call early.
  const { file, ledger, taskQueue } = setup({ isolation: 'none' });
  const [nameA, nameB] = ['node-g', 'node-h'];
  const a = await temporal.startWorker(file, nameA, { OZ0_TEST_FAULT: DIE_AFTER_EARLY_ANSWER });
  const harnessLog = path.join(tmpDir(), 'harness.jsonl');
  const order = uniqueId('o');
  const charge = { call: 'ledger.charge', args: { order_id: order, amount: 7 } };
  const handle = await temporal.client.workflow.start('job', {
    taskQueue,
    workflowId: uniqueId('durable'),
    args: [{ tenant: 'acme', steps: [{ session: { harness: 'probe', input: { log: harnessLog, steps: [charge] } } }] }],
  });
  // The only node runs the session, and dies with the answer; the other takes over.
  expect(await a.exited).toBeNull();
  const b = await temporal.startWorker(file, nameB);
  const trace: JobTrace = await handle.result();
  b.proc.kill('SIGTERM');
  await b.exited;
  const key = `${handle.workflowId}/s1/charge#${argsDigest({ order_id: order, amount: 7 })}/1`;
  // Run 1's harness had its answer (with the key) before its node died; run 2 made the call again under that key.
  const answers = readReceived(harnessLog).filter((r) => r.event === 'answered');
  expect(answers.map((r) => [r.key, r.isError])).toEqual([
    [key, false],
    [key, false],
  ]);
  expect(sessionOf(trace).runs.map((r) => [r.run, r.node])).toEqual([
    [1, nameA],
    [2, nameB],
  ]);
  // Done once: the ledger, shared by both nodes, wrote the charge once; run 2's was answered from its record.
  expect(readKeyStore(ledger).filter((r) => r.key === key)).toHaveLength(1);
  // Answered once: each of the two calls' Updates completed once.
  const events = (await handle.fetchHistory()).events ?? [];
  const calls = events.filter(
    (e) => e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name === 'callTool',
  );
  const completed = events.filter((e) => e.workflowExecutionUpdateCompletedEventAttributes);
  const ids = completed.map((e) => e.workflowExecutionUpdateCompletedEventAttributes!.meta!.updateId);
  expect(calls).toHaveLength(2);
  expect(new Set(ids).size).toBe(ids.length);
  const firstId = calls[0].workflowExecutionUpdateAcceptedEventAttributes!.protocolInstanceId;
  const firstDone = completed.find(
    (e) => e.workflowExecutionUpdateCompletedEventAttributes!.meta!.updateId === firstId,
  )!;
  // Answered when durable: run 1's harness read its answer before its Update was completed (same machine's clock).
  expect(answers[0].t as number).toBeLessThan(timestampMs(firstDone.eventTime));
  // The node died between the two: the workflow task that completed run 1's Update ran on the other node.
  const completedBy = events
    .filter((e) => Number(e.eventId) < Number(firstDone.eventId) && e.workflowTaskStartedEventAttributes)
    .at(-1)!.workflowTaskStartedEventAttributes!.identity;
  expect(completedBy).toBe(nameB);
}, 180_000);

test('H8/T4: a lost run that made a call which may not be made again stops the job, naming the call and its key', async () => {
  const { file, log, taskQueue } = setup();
  const [a, b] = await temporal.startWorkers(file, 'node-c', 'node-d');
  const handle = await temporal.client.workflow.start('job', {
    taskQueue,
    workflowId: uniqueId('risky'),
    // reader.sleep has no hints: one attempt only, so a run that made it cannot be started afresh.
    args: [
      {
        tenant: 'acme',
        steps: [{ session: { harness: 'probe', input: { steps: [{ call: 'reader.sleep', args: { ms: 60_000 } }] } } }],
      },
    ],
  });
  const started = await eventually(
    () => readReceived(log).find((r) => r.tool === 'sleep' && String(r.key).startsWith(`${handle.workflowId}/`)),
    60_000,
    'the call to start',
  );
  const victim = [a, b].find((w) => descendants(w.proc.pid!).includes(started.pid as number))!;
  killTree(victim.proc.pid!);
  const err = await handle.result().catch((e: unknown) => e);
  expect(err).toBeInstanceOf(WorkflowFailedError);
  const message = ((err as WorkflowFailedError).cause as Error).message;
  expect(message).toContain('reader.sleep');
  expect(message).toContain(`key ${handle.workflowId}/c1`);
  expect(message).toContain('may have run');
  for (const w of [a, b]) if (w !== victim) w.proc.kill('SIGTERM');
}, 120_000);

test('H8/H9: an external session whose node is lost: its next call is refused, the client opens it again (run 2, on the other node) and makes its calls again under the same keys; each write once', async () => {
  const { file, ledger, taskQueue } = setup();
  const [a, b] = await temporal.startWorkers(file, 'node-e', 'node-f');
  const handle = await temporal.client.workflow.start('job', {
    taskQueue,
    workflowId: uniqueId('ext-lost'),
    args: [{ tenant: 'acme', steps: [{ session: { external: true } }] }],
  });
  const jobId = handle.workflowId;
  const plan = async (session: LiveSession) => [
    await session.callTool('ledger.set_status', { id: jobId, status: 'open' }),
    await session.callTool('ledger.charge', { order_id: jobId, amount: 3 }),
  ];
  const first = await openSession(temporal.client, jobId);
  const [opened] = await plan(first);
  const victim = [a, b].find((w) => w.name === first.node)!;
  const survivor = victim === a ? b : a;
  killTree(victim.proc.pid!);
  // The run is lost once its lease times out; until then a call may still be accepted and end lost with it.
  const refused = await eventually(
    async () =>
      first
        .callTool('ledger.set_status', { id: jobId, status: 'closed' })
        .then((r) => (r.isError ? r : undefined))
        .catch((err: unknown) => err as Error),
    60_000,
    'the lost run to refuse a call',
  );
  expect(String((refused as Error).message ?? JSON.stringify(refused))).toMatch(/lost|ended/);
  const second = await openSession(temporal.client, jobId);
  expect([second.run, second.node]).toEqual([2, survivor.name]);
  const again = await plan(second);
  await second.close('done');
  const trace: JobTrace = await handle.result();
  expect(again.map((r) => r.key)).toEqual([
    opened.key,
    `${jobId}/s1/charge#${argsDigest({ order_id: jobId, amount: 3 })}/1`,
  ]);
  expect(again.every((r) => !r.isError)).toBe(true);
  const records = readKeyStore(ledger).filter((r) => r.key.startsWith(`${jobId}/`));
  expect(records.map((r) => r.key).sort()).toEqual(again.map((r) => r.key).sort());
  const session = sessionOf(trace);
  expect(session.runs.map((r) => [r.run, r.node])).toEqual([
    [1, victim.name],
    [2, survivor.name],
  ]);
  expect(session.result).toEqual({ isError: false, content: [{ type: 'text', text: 'done' }] });
  survivor.proc.kill('SIGTERM');
}, 180_000);
