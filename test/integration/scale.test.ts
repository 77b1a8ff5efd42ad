/**
 * N4: a tenant's policy and its limiter are one workflow each, and Temporal takes at most 10 Updates in flight on one
 * workflow: no call may depend on winning that race. A node sends each of them one Update at a time, the asks of its
 * calls made meanwhile together in the next (common/update-batcher.ts). Tried here at a test's size beside a control
 * a tenth of it, counted on the server's side (what the probe server received, what each workflow's history holds);
 * the big runs are `npm run bench -- --only scale`.
 */
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { createNode } from '../../worker/node';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { Oz0Status, Oz0Tenant } from '../../model/job';
import { waitingCallsQuery } from '../../model/messages';
import { policyWorkflowId } from '../../model/policy-rules';
import { SHARES_WORKFLOW, sharesWorkflowId } from '../../model/shares';
import { tenantStatus } from '../../client/tenants';
import { listWaitingCalls } from '../../client/calls';
import { openSession } from '../../client/sessions';
import { policyTargetOf } from '../../common/policy-client';
import { eventually, fixture, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { mostAtOnce } from '../helpers/history';

const temporal = useTemporal();

function setup(tenants: Record<string, unknown>) {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
    tools: { '*': { timeoutSeconds: 120, maxAttempts: 1 } },
    tenants,
    node: { slots: 60, reserveSlots: 0 },
  });
  return { config, log };
}

function startJobs(taskQueue: string, tenant: string, n: number, ms: number, prefix: string) {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      temporal.client.workflow.start('job', {
        taskQueue,
        workflowId: uniqueId(`${prefix}-${i}`),
        args: [{ tenant, steps: [{ call: 'probe.hang', args: { ms } }] }],
        priority: { fairnessKey: tenant },
      }),
    ),
  );
}

/** The Updates a workflow's history took, by name: how many, and how many were refused or failed. */
async function updatesOf(workflowId: string): Promise<Record<string, number>> {
  const counts: Record<string, number> = {};
  // Every run: the workflow continues as new after enough changes.
  for await (const run of temporal.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) {
    const history = await temporal.client.workflow.getHandle(workflowId, run.runId).fetchHistory();
    for (const event of history.events ?? []) {
      const name = event.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest?.input?.name;
      if (name) counts[name] = (counts[name] ?? 0) + 1;
    }
  }
  return counts;
}

/** Every job of the prefix says it waits for a person (its `Oz0Status`, one visibility count), then each is asked. */
async function allWaiting(tenant: string, handles: WorkflowHandle[], what: string): Promise<void> {
  const query = `${Oz0Tenant.name} = '${tenant}' AND ${Oz0Status.name} = 'waiting' AND ExecutionStatus = 'Running'`;
  await eventually(
    async () => ((await temporal.client.workflow.count(query)).count >= handles.length ? true : undefined),
    120_000,
    what,
  );
  for (const h of handles) expect(await h.query(waitingCallsQuery)).toHaveLength(1);
}

test('N4: 300 calls of one tenant asking a person at once all wait, none failed; the policy workflows took a batch per round trip, not an Update per call (control: 30); N3: all 330 are listed from visibility alone, no job asked', async () => {
  const tenant = uniqueId('many');
  const { config } = setup({ [tenant]: { policy: { 'probe.*': 'confirm' } } });
  const node = await createNode({ config, logger });
  const all = await node.runUntil(async () => {
    const started: WorkflowHandle[] = [];
    for (const [n, prefix] of [
      [30, 'control'],
      [300, 'load'],
    ] as const) {
      const handles = await startJobs(config.temporal.taskQueue, tenant, n, 10, prefix);
      await allWaiting(tenant, handles, `${n} calls to wait for a person`);
      // Nothing was sent, and no job failed on the way there.
      for (const h of handles) expect((await h.describe()).status.name).toBe('RUNNING');
      started.push(...handles);
    }
    return started;
  });
  // N3: with no node up, no job could answer a query: the list is read from the jobs' memos, in one visibility read.
  const { calls, unreachable } = await listWaitingCalls(temporal.client, { tenant });
  expect(unreachable).toEqual([]);
  expect(calls.map((c) => c.jobId).sort()).toEqual(all.map((h) => h.workflowId).sort());
  for (const c of calls) {
    expect(c).toMatchObject({ tenant, tool: 'probe.hang', pattern: 'probe.*', n: 1, activityId: 'c1', session: null });
    expect(JSON.parse(c.args)).toEqual({ ms: 10 });
  }
  await Promise.all(all.map((h) => h.terminate('test done')));
  // The questions reached both policy workflows in batches: far fewer Updates than questions (330 of each).
  for (const id of [policyWorkflowId(tenant), policyWorkflowId('*')]) {
    const counts = await updatesOf(id);
    expect(counts.watchQuestion ?? 0).toBe(0);
    if (id !== policyWorkflowId('*')) expect(counts.watchQuestions).toBeLessThan(330 / 3);
    expect(counts.watchQuestions).toBeGreaterThan(0);
  }
}, 300_000);

test('N4: a cap of 10 holds 300 calls of 200 ms arriving at once: every call made once, never more than 10 at once, none failed; the limiter took its asks in batches (control: 30)', async () => {
  const tenant = uniqueId('capped');
  const { config, log } = setup({ [tenant]: { limits: { maxRunningCalls: 10 } } });
  const node = await createNode({ config, logger });
  const traces = await node.runUntil(async () => {
    const out: JobTrace[] = [];
    for (const [n, prefix] of [
      [30, 'control'],
      [300, 'load'],
    ] as const) {
      const handles = await startJobs(config.temporal.taskQueue, tenant, n, 200, prefix);
      out.push(...(await Promise.all(handles.map((h) => h.result() as Promise<JobTrace>))));
    }
    // Its limiter kept up: `oz0 tenant status` says nothing of it being behind.
    const shown = await tenantStatus(temporal.client, policyTargetOf(config, temporal.client), tenant);
    expect(shown.limiterBehind).toBeUndefined();
    return out;
  });
  const starts = readReceived(log).filter((e) => e.event === 'start' && e.tool === 'hang');
  expect(starts).toHaveLength(330);
  expect(new Set(starts.map((e) => e.key)).size).toBe(330);
  // Never past the cap; under the load, at it (the cap is what held the calls back).
  expect(mostAtOnce(log, 'control')).toBeLessThanOrEqual(10);
  expect(mostAtOnce(log, 'load')).toBe(10);
  const calls = traces.flatMap((t) => callsOf(t));
  expect(calls.filter((c) => c.result.isError || c.attempts.length !== 1).map((c) => c.result)).toEqual([]);
  const counts = await updatesOf(sharesWorkflowId(tenant));
  expect(counts.take ?? 0).toBe(0);
  // Each call asks once, and once more when its turn comes: far fewer Updates than calls all the same.
  expect(counts.takeMany).toBeLessThan(330 / 2);
}, 300_000);

test('N4: a limiter no node serves holds its calls back, and `oz0 tenant status` says so; once served, every call runs once and none failed', async () => {
  const tenant = uniqueId('behind');
  const { config, log } = setup({ [tenant]: { limits: { maxRunningCalls: 2 } } });
  // The tenant's limiter, started on a queue no node polls yet: its Updates are taken by nobody.
  const elsewhere = uniqueId('oz0-policy-elsewhere');
  await temporal.client.workflow.start(SHARES_WORKFLOW, {
    workflowId: sharesWorkflowId(tenant),
    taskQueue: elsewhere,
    args: [{ tenant }],
  });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handles = await startJobs(config.temporal.taskQueue, tenant, 6, 50, 'held');
    const target = policyTargetOf(config, temporal.client);
    const shown = await eventually(
      async () => (await tenantStatus(temporal.client, target, tenant)).limiterBehind,
      60_000,
      'tenant status to say its limiter is behind',
    );
    expect(shown).toMatch(/its limiter's workflow task has waited [\d.]+ s for a node|its limiter did not answer/);
    // Past the ask's deadline (10 s): nothing was sent, and the calls wait, their jobs running.
    await new Promise((r) => setTimeout(r, 12_000));
    expect(readReceived(log).filter((e) => e.event === 'start')).toEqual([]);
    for (const h of handles) expect((await h.describe()).status.name).toBe('RUNNING');
    // A node that serves the limiter's queue comes: every call runs, once, none failed.
    const other = await createNode({
      config: { ...config, temporal: { ...config.temporal, policyTaskQueue: elsewhere } },
      logger,
      name: uniqueId('node-b'),
    });
    const traces = await other.runUntil(() => Promise.all(handles.map((h) => h.result() as Promise<JobTrace>)));
    const calls = traces.flatMap((t) => callsOf(t));
    expect(calls.filter((c) => c.result.isError || c.attempts.length !== 1).map((c) => c.result)).toEqual([]);
    // The calls that waited for it say why.
    const why = calls.flatMap((c) => c.waited ?? []).map((w) => w.why);
    expect(why.some((w) => w.includes(`${tenant}'s limiter is behind`))).toBe(true);
  });
  const starts = readReceived(log).filter((e) => e.event === 'start');
  expect(new Set(starts.map((e) => e.key)).size).toBe(6);
  expect(starts).toHaveLength(6);
}, 180_000);

/** External sessions of one tenant, opened and each making `calls` calls one after another; their answers. */
async function sessionsCalling(taskQueue: string, tenant: string, n: number, calls: number) {
  const jobs = await Promise.all(
    Array.from({ length: n }, (_, i) =>
      temporal.client.workflow.start('job', {
        taskQueue,
        workflowId: uniqueId(`live-${i}`),
        args: [{ tenant, steps: [{ session: { external: true } }] }],
      }),
    ),
  );
  const sessions = await Promise.all(jobs.map((h) => openSession(temporal.client, h.workflowId)));
  const answers = await Promise.all(
    sessions.map(async (s) => {
      const out = [];
      for (let i = 0; i < calls; i++) out.push(await s.callTool('probe.hang', { ms: 20 }));
      await s.close({ done: true });
      return out;
    }),
  );
  await Promise.all(jobs.map((h) => h.result()));
  return answers.flat();
}

test('N5: 12 live sessions on a node of 4 slots: their leases hold none of the slots, every call is answered (control: 2 sessions)', async () => {
  const tenant = uniqueId('live');
  const { config, log } = setup({});
  const small = { ...config, node: { ...config.node, slots: 4 } };
  const node = await createNode({ config: small, logger });
  await node.runUntil(async () => {
    for (const n of [2, 12]) {
      const answers = await sessionsCalling(small.temporal.taskQueue, tenant, n, 3);
      expect(answers).toHaveLength(n * 3);
      expect(answers.filter((a) => a.isError)).toEqual([]);
    }
  });
  expect(readReceived(log).filter((e) => e.event === 'start')).toHaveLength(42);
}, 180_000);

test('N5: a node that holds its most sessions refuses the next as it opens, saying so; the sessions it holds go on', async () => {
  const tenant = uniqueId('full');
  const { config } = setup({});
  const node = await createNode({ config: { ...config, node: { ...config.node, maxSessions: 2 } }, logger });
  await node.runUntil(async () => {
    const start = () =>
      temporal.client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId('live'),
        args: [{ tenant, steps: [{ session: { external: true } }] }],
      });
    const held = await Promise.all([start(), start()]);
    const sessions = await Promise.all(held.map((h) => openSession(temporal.client, h.workflowId)));
    const third = await start();
    await expect(openSession(temporal.client, third.workflowId)).rejects.toThrow(
      /takes no more sessions: it holds its most sessions \(node.maxSessions: 2/,
    );
    // The two it holds still answer.
    for (const s of sessions) expect((await s.callTool('probe.hang', { ms: 10 })).isError).toBeFalsy();
    await Promise.all(sessions.map((s) => s.close({ done: true })));
    await Promise.all(held.map((h) => h.result()));
    await third.terminate('test done');
  });
}, 120_000);
