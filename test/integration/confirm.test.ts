/**
 * Calls a person approves (A4-A6): a tool whose verdict is `confirm` waits before its first attempt, durably and
 * visibly, until a person answers (`oz0 call approve|deny`, the `answerCall` Update), its time limit passes, the
 * tenant's policy changes, or the job is cancelled. On a real dev server, with the example ledger and the probe
 * server; every assertion about a call is made on what its server received.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Connection } from '@temporalio/client';
import type { WorkflowHandle } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { answerCall } from '../../client/calls';
import { snapshot } from '../../client/watch';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import type { PolicyTarget } from '../../common/policy-client';
import type { JobSpec } from '../../model/schemas';
import type { LoadedConfig } from '../../common/config';
import { createNode } from '../../worker/node';
import { WAITING_MEMO, callsOf } from '../../model/job';
import { statusQuery, waitingCallsQuery } from '../../model/messages';
import type { JobTrace } from '../../model/job';
import type { WaitingCall } from '../../model/messages';
import { killUpdate, reviveUpdate, setPolicyUpdate } from '../../model/messages';
import { oz0 } from '../helpers/cli';
import {
  attributesOf,
  eventually,
  example,
  fixture,
  logger,
  restartableTemporal,
  testClient,
  testConfig,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import type { TemporalAt } from '../helpers/temporal';

const temporal = useTemporal();

/** The SDK's own query behind the UI's "Current Details". */
const METADATA_QUERY = '__temporal_workflow_metadata';

/** The ledger (its received log says what it was sent) and the probe; a config file for the CLI beside it. */
function setup(address: string | TemporalAt = temporal.server, tools: Record<string, unknown> = {}) {
  const dir = tmpDir();
  const received = path.join(dir, 'received.jsonl');
  const probeLog = path.join(dir, 'probe.jsonl');
  const config = testConfig(address, {
    servers: {
      ledger: {
        command: 'node',
        args: [example('ledger')],
        env: { OZ0_RECEIVED_LOG: received, LEDGER_FILE: path.join(dir, 'ledger.jsonl') },
      },
      probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: probeLog } },
    },
    tools: { '*': { timeoutSeconds: 30, maxAttempts: 3 }, ...tools },
  });
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(file, JSON.stringify({ temporal: config.temporal }));
  const refunds = () => readReceived(received).filter((r) => r.tool === 'refund');
  return { config, file, received, probeLog, refunds };
}

async function withNode<T>(config: LoadedConfig, fn: () => Promise<T>): Promise<T> {
  const node = await createNode({ config, logger });
  return node.runUntil(fn);
}

function target(config: LoadedConfig, client = temporal.client): PolicyTarget {
  return policyTargetOf(config, client);
}

function start(config: LoadedConfig, spec: JobSpec, client = temporal.client) {
  return client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('job'),
    args: [spec],
  });
}

/** Resolves once the job's call `activityId` waits for a person, with what the job says of it. */
function waitsFor(handle: WorkflowHandle, activityId: string, ms = 30_000): Promise<WaitingCall> {
  return eventually(
    async () => (await handle.query(waitingCallsQuery)).find((c) => c.activityId === activityId),
    ms,
    `call ${activityId} to wait for a person`,
  );
}

const refund = (order: string) => ({ call: 'ledger.refund', args: { order_id: order, amount: 5 } });
const text = (trace: JobTrace, i: number) => (callsOf(trace)[i].result.content[0] as { text: string }).text;

test('A4/A5: a confirm call waits before its first attempt (Oz0Status, status, details, list and watch say so); `oz0 call approve` lets it run once; the trace keeps question and answer', async () => {
  const { config, file, refunds } = setup();
  const tenant = uniqueId('t');
  await withNode(config, async () => {
    await changePolicy(target(config), tenant, setPolicyUpdate, ['ledger.refund', 'confirm']);
    const handle = await start(config, {
      tenant,
      steps: [
        { call: 'ledger.lookup_order', args: { order_id: 'o-1' } },
        { call: 'ledger.refund', args: { order_id: 'o-1', amount: 5, memo: { password: 'hunter2' } } },
      ],
    });
    const id = handle.workflowId;
    const asked = await waitsFor(handle, 'c2');
    expect(asked).toMatchObject({ n: 2, tool: 'ledger.refund', key: `${id}/c2`, pattern: 'ledger.refund' });
    expect(asked.args).toContain('[redacted]');
    expect(asked.args).not.toContain('hunter2');
    expect(await handle.query(statusQuery)).toBe('waiting');
    // Visible: a filter in the Temporal UI finds it; its current details name the call, its key and arguments.
    const found = await eventually(async () => {
      for await (const run of temporal.client.workflow.list({
        query: `WorkflowId = "${id}" AND Oz0Status = "waiting"`,
      }))
        return run;
      return undefined;
    });
    expect(attributesOf(found)).toMatchObject({ Oz0Status: 'waiting', Oz0Tenant: tenant });
    // N3: the job's memo lists what waits, as its query does, for one visibility read to show every waiting call;
    // sealed with the tenant's key in Temporal (its raw bytes hold no argument), opened by the client's codec.
    expect(found.memo?.[WAITING_MEMO]).toEqual([asked]);
    const raw = await temporal.client.workflowService.describeWorkflowExecution({
      namespace: config.temporal.namespace,
      execution: { workflowId: id },
    });
    const sealed = raw.workflowExecutionInfo?.memo?.fields?.[WAITING_MEMO];
    expect(sealed?.data?.length).toBeGreaterThan(0);
    expect(Buffer.from(sealed!.data!).toString('latin1')).not.toContain('o-1');
    const { currentDetails } = await handle.query<{ currentDetails: string }>(METADATA_QUERY);
    expect(currentDetails).toMatch(/^\*\*waiting\*\*/);
    expect(currentDetails).toContain(`\`ledger.refund\` · call \`c2\` · key \`${id}/c2\``);
    expect(currentDetails).toContain('[redacted]');
    expect(currentDetails).not.toContain('hunter2');
    // oz0 job status says waiting, then names what waits: the call, its tool, its arguments (redacted).
    const status = (await oz0(['job', 'status', id, '--config', file])).stdout.trim().split('\n');
    expect(status[0]).toBe('waiting');
    expect(status[1]).toMatch(
      /^ {2}c2 ledger\.refund \{"order_id":"o-1","amount":5,"memo":\{"password":"\[redacted\]"\}\} since /,
    );
    expect(status[1]).toContain(`oz0 call approve|deny ${id} c2`);
    const list = await oz0(['call', 'list', '--tenant', tenant, '--json', '--config', file]);
    expect(JSON.parse(list.stdout).calls).toEqual([
      expect.objectContaining({ jobId: id, tenant, activityId: 'c2', tool: 'ledger.refund', key: `${id}/c2` }),
    ]);
    expect((await oz0(['call', 'list', '--tenant', tenant, '--config', file])).stdout).toMatch(
      new RegExp(`${id}\\s+c2\\s+ledger\\.refund\\s+${tenant}`),
    );
    expect((await snapshot(temporal.client, id)).questions).toEqual([expect.objectContaining({ activityId: 'c2' })]);
    // Nothing reached the ledger while it waited.
    expect(refunds()).toHaveLength(0);

    const approved = await oz0(['call', 'approve', id, '--by', 'alice', '--config', file]);
    expect(approved.stdout).toContain(`approved c2 (ledger.refund, key ${id}/c2) of ${id}, by cli:alice at`);
    const trace: JobTrace = await handle.result();
    const step = callsOf(trace)[1];
    expect(step.attempts).toEqual([{ attempt: 1, outcome: 'ok' }]);
    expect(step.question).toEqual({
      askedAt: asked.askedAt,
      pattern: 'ledger.refund',
      answer: { approved: true, by: 'cli:alice', at: expect.any(String) },
    });
    expect(refunds()).toEqual([expect.objectContaining({ key: `${id}/c2` })]);
    // Its wait over, the memo no longer lists it.
    expect((await handle.describe()).memo?.[WAITING_MEMO]).toBeUndefined();
    // The step that did not ask has no question.
    expect(callsOf(trace)[0].question).toBeUndefined();
    const shown = await oz0(['job', 'trace', id, '--config', file]);
    expect(shown.stdout).toMatch(/#2 question: asked \S+ \(ledger\.refund: confirm\), approved by cli:alice at /);
  });
});

test('A5/A6: a denial ends the call as an error result with its reason, as a model reads it; nothing is sent; the job goes on', async () => {
  const { config, file, refunds } = setup();
  const tenant = uniqueId('t');
  await withNode(config, async () => {
    await changePolicy(target(config), tenant, setPolicyUpdate, ['ledger.*', 'confirm']);
    await changePolicy(target(config), tenant, setPolicyUpdate, ['ledger.lookup_order', 'allow']);
    const handle = await start(config, {
      tenant,
      steps: [refund('o-2'), { call: 'ledger.lookup_order', args: { order_id: 'o-2' } }],
    });
    await waitsFor(handle, 'c1');
    const denied = await oz0([
      'call',
      'deny',
      handle.workflowId,
      'c1',
      '--reason',
      'refunds over 0 need a ticket',
      '--by',
      'bob',
      '--config',
      file,
    ]);
    expect(denied.stdout).toContain('denied c1 (ledger.refund');
    const trace: JobTrace = await handle.result();
    expect(callsOf(trace)[0].result.isError).toBe(true);
    expect(text(trace, 0)).toBe('oz0: refused: a person (cli:bob) denied this call: refunds over 0 need a ticket');
    expect(callsOf(trace)[0].attempts).toEqual([
      {
        attempt: 1,
        outcome: 'refused',
        note: expect.stringMatching(/^refused: denied by cli:bob at .*: refunds over 0/),
      },
    ]);
    expect(callsOf(trace)[0].question?.answer).toMatchObject({ approved: false, by: 'cli:bob' });
    expect(callsOf(trace)[1].result.isError).toBe(false);
    expect(refunds()).toHaveLength(0);
    // An answer nobody waits for is refused, saying so.
    const late = await oz0(['call', 'approve', handle.workflowId, '--config', file]);
    expect(late.code).toBe(1);
  });
});

test('A5: a yes covers its own call only — two calls with the same arguments each wait, and each yes lets exactly one through (a session call too)', async () => {
  const { config, refunds } = setup();
  const tenant = uniqueId('t');
  await withNode(config, async () => {
    await changePolicy(target(config), tenant, setPolicyUpdate, ['ledger.refund', 'confirm']);
    const handle = await start(config, {
      tenant,
      steps: [refund('o-3'), refund('o-3'), { session: [refund('o-3'), refund('o-3')] }],
    });
    const id = handle.workflowId;
    const keys: string[] = [];
    for (const call of ['c1', 'c2', 'c3', 'c4']) {
      const asked = await waitsFor(handle, call);
      // The call before it ran once; this one has sent nothing.
      expect(refunds().map((r) => r.key)).toEqual(keys);
      const answered = await answerCall(temporal.client, id, { approve: true, by: 'carol' });
      expect(answered).toMatchObject({ activityId: call, key: asked.key, approved: true, by: 'carol' });
      keys.push(asked.key);
      await eventually(() => (refunds().length === keys.length ? true : undefined), 20_000, `${call} to run`);
    }
    const trace: JobTrace = await handle.result();
    expect(new Set(keys).size).toBe(4);
    expect(keys.slice(2)).toEqual([
      expect.stringMatching(new RegExp(`^${id}/s1/refund#[0-9a-f]{32}/1$`)),
      expect.stringMatching(new RegExp(`^${id}/s1/refund#[0-9a-f]{32}/2$`)),
    ]);
    expect(refunds().map((r) => r.key)).toEqual(keys);
    expect(callsOf(trace).every((s) => s.question?.answer?.by === 'carol' && !s.result.isError)).toBe(true);
  });
});

test('A5/B2: a yes covers the call’s retries after busy answers, under its one key: asked once, sent twice', async () => {
  const { config, probeLog } = setup();
  const tenant = uniqueId('t');
  await withNode(config, async () => {
    await changePolicy(target(config), tenant, setPolicyUpdate, ['probe.busy_idem', 'confirm']);
    const handle = await start(config, { tenant, steps: [{ call: 'probe.busy_idem', args: { times: 1 } }] });
    await waitsFor(handle, 'c1');
    expect(readReceived(probeLog).filter((r) => r.event === 'busy-call')).toHaveLength(0);
    await answerCall(temporal.client, handle.workflowId, { approve: true, by: 'dan' });
    const trace: JobTrace = await handle.result();
    expect(callsOf(trace)[0].attempts.map((a) => a.outcome)).toEqual(['busy', 'ok']);
    const sent = readReceived(probeLog).filter((r) => r.event === 'busy-call');
    expect(sent.map((r) => r.key)).toEqual([`${handle.workflowId}/c1`, `${handle.workflowId}/c1`]);
  });
});

test('A6: no answer within the tool’s confirmTimeoutSeconds ends the call as a refused error result that says so; the job goes on', async () => {
  const { config, refunds } = setup(undefined, { 'ledger.refund': { confirmTimeoutSeconds: 2 } });
  const tenant = uniqueId('t');
  await withNode(config, async () => {
    await changePolicy(target(config), tenant, setPolicyUpdate, ['ledger.refund', 'confirm']);
    const handle = await start(config, {
      tenant,
      steps: [refund('o-4'), { call: 'ledger.lookup_order', args: { order_id: 'o-4' } }],
    });
    const asked = await waitsFor(handle, 'c1');
    expect(Date.parse(asked.until) - Date.parse(asked.askedAt)).toBe(2000);
    const trace: JobTrace = await handle.result();
    expect(text(trace, 0)).toBe(
      "oz0: refused: nobody answered within 2 s whether this call may run (ledger.refund waits for a person's yes; confirmTimeoutSeconds)",
    );
    expect(callsOf(trace)[0].attempts).toEqual([
      { attempt: 1, outcome: 'refused', note: 'refused: no answer within 2 s (confirmTimeoutSeconds)' },
    ]);
    expect(callsOf(trace)[0].question).toMatchObject({ ended: 'no answer within 2 s' });
    expect(callsOf(trace)[1].result.isError).toBe(false);
    expect(refunds()).toHaveLength(0);
  });
});

test('A6: a job cancelled while a call waits ends CANCELED without the call being made', async () => {
  const { config, file, refunds } = setup();
  const tenant = uniqueId('t');
  await withNode(config, async () => {
    await changePolicy(target(config), tenant, setPolicyUpdate, ['ledger.refund', 'confirm']);
    const handle = await start(config, { tenant, steps: [refund('o-5'), refund('o-5')] });
    await waitsFor(handle, 'c1');
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    expect((await oz0(['job', 'status', handle.workflowId, '--config', file])).stdout.trim()).toBe('CANCELED');
    const trace = await handle.query<JobTrace>('trace');
    expect(callsOf(trace)).toHaveLength(1);
    expect(callsOf(trace)[0].attempts).toEqual([
      {
        attempt: 1,
        outcome: 'cancelled',
        note: "oz0: the job was cancelled; it waited for a person's yes; nothing was sent",
      },
    ]);
    expect(callsOf(trace)[0].question).toMatchObject({ ended: 'the job was cancelled' });
    expect(await handle.query(waitingCallsQuery)).toEqual([]);
    expect(refunds()).toHaveLength(0);
  });
});

test('A4/B6/C5: the policy read again while a call waits — confirm→deny refuses it, confirm→allow runs it unanswered, a kill switch for every tenant refuses it', async () => {
  const { config, refunds } = setup();
  const tenant = uniqueId('t');
  const policy = target(config);
  await withNode(config, async () => {
    await changePolicy(policy, tenant, setPolicyUpdate, ['ledger.refund', 'confirm']);
    const denied = await start(config, { tenant, steps: [refund('o-6')] });
    await waitsFor(denied, 'c1');
    await changePolicy(policy, tenant, setPolicyUpdate, ['ledger.refund', 'deny']);
    const deniedTrace: JobTrace = await denied.result();
    expect(callsOf(deniedTrace)[0].attempts).toEqual([
      { attempt: 1, outcome: 'refused', note: "denied by the tenant's policy (ledger.refund: deny)" },
    ]);
    expect(callsOf(deniedTrace)[0].question).toMatchObject({
      ended: 'the policy changed while it waited (ledger.refund: deny)',
    });

    await changePolicy(policy, tenant, setPolicyUpdate, ['ledger.refund', 'confirm']);
    const allowed = await start(config, { tenant, steps: [refund('o-7')] });
    await waitsFor(allowed, 'c1');
    // Another pattern, not this call's: it goes on waiting.
    await changePolicy(policy, tenant, setPolicyUpdate, ['ledger.charge', 'allow']);
    await changePolicy(policy, tenant, setPolicyUpdate, ['ledger.*', 'allow']);
    // It was told (ledger.* covers it), looked again, and waits again: its second ask is in its history.
    await eventually(async () => {
      const events = (await allowed.fetchHistory()).events ?? [];
      return events.filter((e) => e.activityTaskCompletedEventAttributes).length >= 2 ? true : undefined;
    });
    await waitsFor(allowed, 'c1');
    expect(refunds()).toHaveLength(0);
    await changePolicy(policy, tenant, setPolicyUpdate, ['ledger.refund', 'allow']);
    const allowedTrace: JobTrace = await allowed.result();
    expect(callsOf(allowedTrace)[0].attempts).toEqual([{ attempt: 1, outcome: 'ok' }]);
    expect(callsOf(allowedTrace)[0].question).toEqual({
      askedAt: expect.any(String),
      pattern: 'ledger.refund',
      ended: 'the policy changed while it waited (ledger.refund: allow)',
    });
    expect(refunds().map((r) => r.key)).toEqual([`${allowed.workflowId}/c1`]);

    await changePolicy(policy, tenant, setPolicyUpdate, ['ledger.refund', 'confirm']);
    const killed = await start(config, { tenant, steps: [refund('o-8')] });
    await waitsFor(killed, 'c1');
    await changePolicy(policy, '*', killUpdate, ['ledger.refund']);
    try {
      const killedTrace: JobTrace = await killed.result();
      expect(callsOf(killedTrace)[0].attempts).toEqual([
        {
          attempt: 1,
          outcome: 'refused',
          note: 'killed: the kill switch for ledger.refund is on (oz0 tool revive ledger.refund)',
        },
      ]);
    } finally {
      await changePolicy(policy, '*', reviveUpdate, ['ledger.refund']);
    }
    expect(refunds()).toHaveLength(1);
  });
});

test('A4/A3: a call waits across a restart of the Temporal server (its state kept); the yes after it lets exactly one call through', async () => {
  const server = await restartableTemporal();
  const { config, refunds } = setup(server.address);
  const tenant = uniqueId('t');
  const connect = async () => {
    const connection = await Connection.connect({ address: server.address });
    return { connection, client: testClient(connection, 'default') };
  };
  let { connection, client } = await connect();
  try {
    const workflowId = await withNode(config, async () => {
      await changePolicy(target(config, client), tenant, setPolicyUpdate, ['ledger.refund', 'confirm']);
      const handle = await start(config, { tenant, steps: [refund('o-9')] }, client);
      await waitsFor(handle, 'c1');
      return handle.workflowId;
    });
    await connection.close();
    await server.restart();
    ({ connection, client } = await connect());
    await withNode(config, async () => {
      const handle = client.workflow.getHandle(workflowId);
      await waitsFor(handle, 'c1');
      expect(refunds()).toHaveLength(0);
      await answerCall(client, workflowId, { approve: true, by: 'erin' });
      const trace: JobTrace = await handle.result();
      expect(callsOf(trace)[0].attempts).toEqual([{ attempt: 1, outcome: 'ok' }]);
    });
    expect(refunds().map((r) => r.key)).toEqual([`${workflowId}/c1`]);
  } finally {
    await connection.close();
    await server.stop();
  }
}, 180_000);
