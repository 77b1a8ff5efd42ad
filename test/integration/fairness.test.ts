/**
 * Tenants share the platform fairly (SPEC F1, F2, F4), counted on the MCP server's side: when each tenant's call
 * started, and in what order. Each rule beside its control — the same flood on a Temporal server with fairness off,
 * the same node without its reserved slot — which shows the test can fail.
 */
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { Connection } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { createNode } from '../../worker/node';
import type { LoadedConfig } from '../../common/config';
import { DEV_SERVER_DYNAMIC_CONFIG, startDevServer } from '../../worker/dev-server';
import type { DevServer } from '../../worker/dev-server';
import { findTemporalCli } from '../../worker/temporal-cli';
import { FAIRNESS_SAID } from '../../worker/fairness';
import { policyTargetOf } from '../../common/policy-client';
import { setShares } from '../../client/tenants';
import { startJob } from '../../client/jobs';
import type { JobSpec } from '../../model/schemas';
import { jobPriority } from '../../model/shares';
import {
  eventually,
  fixture,
  logger,
  testClient,
  testConfig,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';

const temporal = useTemporal();

/** A dev server like the shared ones, but with Temporal's fairness off: the controls' first come, first served. */
let unfair: { server: DevServer; client: Client; connection: Connection };
beforeAll(async () => {
  const server = await startDevServer({
    cli: findTemporalCli({ install: false }),
    uiPort: false,
    dynamicConfig: { ...DEV_SERVER_DYNAMIC_CONFIG, 'matching.enableFairness': false },
  });
  const connection = await Connection.connect({ address: server.address });
  unfair = { server, connection, client: testClient(connection, 'default') };
}, 90_000);
afterAll(async () => {
  await unfair?.connection.close();
  await unfair?.server.stop();
});

function setup(at: 'fair' | 'unfair', node: Record<string, unknown>, tenants: Record<string, unknown> = {}) {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const input = {
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
    tools: { '*': { timeoutSeconds: 60, maxAttempts: 1 } },
    tenants,
    node,
  };
  const config = at === 'fair' ? temporal.config(input) : testConfig(unfair.server.address, input);
  const client = at === 'fair' ? temporal.client : unfair.client;
  return { config, client, log };
}

function hangJob(tenant: string, ms: number): JobSpec {
  return { tenant, steps: [{ call: 'probe.hang', args: { ms } }] };
}

/** Starts the jobs as a platform would, with their tenant as fairness key and their priority (as startJob does). */
async function flood(client: Client, config: LoadedConfig, specs: JobSpec[], prefix: string): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < specs.length; i += 50) {
    await Promise.all(
      specs.slice(i, i + 50).map(async (spec, j) => {
        const workflowId = uniqueId(`${prefix}-${i + j}`);
        ids.push(workflowId);
        await client.workflow.start('job', {
          taskQueue: config.temporal.taskQueue,
          workflowId,
          args: [spec],
          priority: jobPriority(spec),
        });
      }),
    );
  }
  return ids;
}

/** The server's starts of `hang`, in order, each with the job its key names. */
function starts(log: string): Array<{ t: number; job: string }> {
  return readReceived(log)
    .filter((e) => e.event === 'start' && e.tool === 'hang')
    .map((e) => ({ t: e.t as number, job: String(e.key).split('/')[0] }));
}

/**
 * F1: beta's one call under acme's flood of 300 queued one-call jobs (4 slots, 150 ms a call: 11 s of acme's work).
 * Resolves to how long beta's call waited after its job started, and how many of acme's calls started before it.
 */
async function betaUnderFlood(at: 'fair' | 'unfair') {
  const { config, client, log } = setup(at, { slots: 4 });
  const node = await createNode({ config, logger });
  return node.runUntil(async () => {
    const acme = uniqueId('acme');
    const beta = uniqueId('beta');
    await flood(client, config, Array(300).fill(hangJob(acme, 150)), 'acme');
    const [betaJob] = await flood(client, config, [hangJob(beta, 150)], 'beta');
    const startedAt = Date.now();
    const seen = await eventually(() => starts(log).find((s) => s.job === betaJob), 60_000, "beta's call");
    const before = starts(log).filter((s) => s.job.startsWith('acme') && s.t < seen.t).length;
    return { waitedMs: seen.t - startedAt, acmeFirst: before };
  });
}

test("F1: beta's single call goes ahead of acme's 300 queued calls; with fairness off it waits behind them", async () => {
  const fair = await betaUnderFlood('fair');
  // Ahead of the flood: after only the calls already on their way (4 slots), not after the backlog — counted, not
  // timed. Its wait, on a quiet machine well under 2 s, is bench/'s to measure (`npm run bench -- --only fairness`).
  expect(fair.acmeFirst).toBeLessThan(30);
  const control = await betaUnderFlood('unfair');
  // The control: first come, first served, beta's call waits behind most of acme's backlog.
  expect(control.acmeFirst).toBeGreaterThan(150);
  expect(control.waitedMs).toBeGreaterThan(fair.waitedMs * 2);
}, 180_000);

test('F1: acme and beta weighted 3 and 1, both flooding, are served 3 : 1 (±20 %); equal weights serve them 1 : 1', async () => {
  const share = async (weighted: boolean) => {
    // No slot kept (F2): the share here is Temporal's dispatch alone.
    const { config, client, log } = setup('fair', { slots: 2, reserveSlots: 0 });
    const acme = uniqueId('acme');
    const beta = uniqueId('beta');
    // As an operator would: `oz0 tenant set` (its policy workflow needs a node), before the flood is queued.
    if (weighted) {
      const target = policyTargetOf(config, client);
      await (
        await createNode({ config, logger })
      ).runUntil(() => setShares(client, target, config.temporal, acme, { weight: 3 }));
    }
    const specs = Array.from({ length: 200 }, (_, i) => hangJob(i % 2 ? beta : acme, 20));
    const ids = await flood(client, config, specs, 'share');
    const tenantOf = new Map(ids.map((id, i) => [id, specs[i].tenant]));
    const node = await createNode({ config, logger });
    await node.runUntil(() => eventually(() => (starts(log).length >= 120 ? true : undefined), 60_000, '120 calls'));
    // The first 100 calls both tenants had queued: how many were acme's.
    const first = starts(log).slice(0, 100);
    return first.filter((s) => tenantOf.get(s.job) === acme).length / first.filter((s) => tenantOf.has(s.job)).length;
  };
  const weighted = await share(true);
  expect(weighted / (1 - weighted)).toBeGreaterThan(3 * 0.8);
  expect(weighted / (1 - weighted)).toBeLessThan(3 * 1.2);
  const even = await share(false);
  expect(even).toBeGreaterThan(0.4);
  expect(even).toBeLessThan(0.6);
}, 180_000);

/**
 * F2: acme's long calls take every slot they may of a node of 4, then beta's one call comes. Resolves to how long
 * beta's call waited after its job started.
 */
async function betaAfterLongCalls(node: Record<string, unknown>) {
  const { config, client, log } = setup('fair', { slots: 4, ...node });
  const oz0 = await createNode({ config, logger });
  return oz0.runUntil(async () => {
    const acme = uniqueId('acme');
    const beta = uniqueId('beta');
    const acmeJobs = await flood(client, config, Array(6).fill(hangJob(acme, 9000)), 'acme');
    // acme's calls hold what they may of the node's slots, and its others keep asking.
    await eventually(() => (starts(log).length >= 3 ? true : undefined), 20_000, "acme's calls");
    await new Promise((r) => setTimeout(r, 1500));
    const running = starts(log).length;
    const [betaJob] = await flood(client, config, [hangJob(beta, 100)], 'beta');
    const startedAt = Date.now();
    const seen = await eventually(() => starts(log).find((s) => s.job === betaJob), 30_000, "beta's call");
    await Promise.all(acmeJobs.map((id) => client.workflow.getHandle(id).cancel()));
    return { waitedMs: seen.t - startedAt, acmeRunning: running };
  });
}

test("F2: with acme's long calls in every slot it may take, beta's call starts within 2 s; a node keeping no slot makes it wait", async () => {
  const reserved = await betaAfterLongCalls({});
  // A node of 4 keeps 1 (its default): acme holds 3.
  expect(reserved.acmeRunning).toBe(3);
  expect(reserved.waitedMs).toBeLessThan(2000);
  const control = await betaAfterLongCalls({ reserveSlots: 0 });
  expect(control.acmeRunning).toBe(4);
  expect(control.waitedMs).toBeGreaterThan(4000);
}, 120_000);

test('F1: a node on a server whose fairness is off says so at start, naming the setting; on one where it is on, that it is', async () => {
  const off = setup('unfair', { slots: 2 });
  const offNode = await createNode({ config: off.config, logger });
  const found = await offNode.runUntil(() => offNode.fairness);
  expect(found).toBe('off');
  const on = setup('fair', { slots: 2 });
  const onNode = await createNode({ config: on.config, logger });
  expect(await onNode.runUntil(() => onNode.fairness)).toBe('on');
  // What it says names the setting, for self-hosted servers and for Temporal Cloud.
  expect(FAIRNESS_SAID.off).toContain('matching.enableFairness');
  expect(FAIRNESS_SAID.off).toContain('namespace settings');
}, 90_000);

test('F1: a job started without its fairness key (a plain client start) gets its tenant as its key from its node', async () => {
  const { config, client } = setup('fair', { slots: 2 });
  const tenant = uniqueId('t');
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('plain'),
      args: [hangJob(tenant, 10)],
    });
    await handle.result();
    const described = await handle.describe();
    expect(described.raw.workflowExecutionInfo?.priority?.fairnessKey).toBe(tenant);
    // Its call carried the key too (said on each activity it schedules).
    const events = (await handle.fetchHistory()).events ?? [];
    const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'callTool');
    expect(scheduled?.activityTaskScheduledEventAttributes?.priority?.fairnessKey).toBe(tenant);
  });
}, 60_000);

/**
 * F4: one slot, held by a long call; then five jobs of the default priority queue, then one that asks `priority` (its
 * tenant may ask any). Resolves to the place its call started in.
 */
async function orderWith(priority: number | undefined) {
  const tenant = uniqueId('t');
  const { config, client, log } = setup(
    'fair',
    { slots: 1, reserveSlots: 0 },
    { [tenant]: { fairness: { maxPriority: 1 } } },
  );
  const node = await createNode({ config, logger });
  return node.runUntil(async () => {
    // The holder's call is long enough that all six are queued behind it even with both cores busy (a fresh clone's
    // CI: at 1.5 s the holder was done before the urgent job's call was queued, and it ran last).
    await flood(client, config, [hangJob(tenant, 8000)], 'holder');
    await eventually(() => (starts(log).length === 1 ? true : undefined), 20_000, 'the first call');
    const scheduled = (id: string) =>
      eventually(async () => {
        const events = (await client.workflow.getHandle(id).fetchHistory()).events ?? [];
        return events.some((e) => e.activityTaskScheduledEventAttributes) ? true : undefined;
      });
    const ids = await flood(client, config, Array(5).fill(hangJob(tenant, 20)), 'later');
    // Their calls are scheduled (queued behind the held slot) before the urgent job starts.
    for (const id of ids) await scheduled(id);
    const urgentSpec = { ...hangJob(tenant, 20), ...(priority ? { priority } : {}) };
    const [urgent] = await flood(client, config, [urgentSpec], 'urgent');
    await scheduled(urgent);
    // What the order means holds only if the slot was still held when the urgent call was queued.
    expect(starts(log)).toHaveLength(1);
    await Promise.all([...ids, urgent].map((id) => client.workflow.getHandle(id).result()));
    return starts(log).findIndex((s) => s.job === urgent);
  });
}

test('F4: a job that asks priority 1 goes ahead of the jobs queued before it; without it, after them', async () => {
  // The first start is the call that held the slot: the urgent one runs next.
  expect(await orderWith(1)).toBe(1);
  expect(await orderWith(undefined)).toBe(6);
}, 120_000);

test("F4: a job that asks a priority ahead of its tenant's highest is refused, naming the field: by the client before it starts, by its node if started anyway", async () => {
  const { config, client } = setup('fair', { slots: 2 });
  const tenant = uniqueId('t');
  const spec = { ...hangJob(tenant, 10), priority: 1 };
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const jc = { client, taskQueue: config.temporal.taskQueue, policy: policyTargetOf(config, client) };
    await expect(startJob(jc, spec)).rejects.toThrow(
      /^bad job spec: priority: 1 is ahead of what this tenant may ask: its highest is 3/,
    );
    // Started anyway, from a plain client: its node refuses it before any call, naming the field.
    const [id] = await flood(client, config, [spec], 'plain');
    await expect(client.workflow.getHandle(id).result()).rejects.toMatchObject({
      cause: { message: expect.stringContaining('priority: 1 is ahead of what this tenant may ask') },
    });
  });
}, 60_000);
