/**
 * A tenant's caps and rates across every node (SPEC F3, F5), counted on the server's side: how many of its calls the
 * MCP server runs at once, and when each starts. A call over a cap waits in its job (no slot, no attempt), keeps its
 * place, and its trace says why and how long; a cancel and a kill switch reach it while it waits.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import { callsOf } from '../../model/job';
import { openedWith, processDataOf } from '../../data';
import type { JobTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { policyTargetOf, changePolicy } from '../../common/policy-client';
import { killUpdate } from '../../model/messages';
import { limiterStatus, weightsOn } from '../../common/shares-client';
import { oz0 } from '../helpers/cli';
import { Worker } from '@temporalio/worker';
import { WorkflowClient } from '@temporalio/client';
import { temporal as proto } from '@temporalio/proto';
import { workflowBundle } from '../../worker/bundle';
import { DEFAULT_PRIORITY, sharesWorkflowId } from '../../model/shares';
import type { TakeRequest } from '../../model/limiter';
import { timestampMs } from '../../common/time';
import { setShares } from '../../client/tenants';
import { openSession } from '../../client/sessions';
import { eventually, fixture, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { mostAtOnce } from '../helpers/history';
import { withoutReleaseLabels } from '../helpers/prometheus';

const temporal = useTemporal();

function setup(tenants: Record<string, unknown>, node: Record<string, unknown> = {}) {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
    tools: { '*': { timeoutSeconds: 60, maxAttempts: 1 } },
    tenants,
    // No slot kept for other tenants (F2, fairness.test.ts): what holds the calls here is their caps and rates alone.
    node: { slots: 8, reserveSlots: 0, ...node },
  });
  return { config, log };
}

function hangJob(tenant: string, ms: number): JobSpec {
  return { tenant, steps: [{ call: 'probe.hang', args: { ms } }] };
}

async function startJobs(taskQueue: string, specs: JobSpec[], prefix: string) {
  return Promise.all(
    specs.map((spec, i) =>
      temporal.client.workflow.start('job', {
        taskQueue,
        workflowId: uniqueId(`${prefix}-${i}`),
        args: [spec],
        priority: { fairnessKey: spec.tenant },
      }),
    ),
  );
}

/** The starts a tenant's limiter gave its rated calls (ms, in order), from the results of its Updates in history. */
async function givenStarts(workflowId: string): Promise<number[]> {
  const handle = temporal.client.workflow.getHandle(workflowId);
  const converter = temporal.client.options.loadedDataConverter;
  const context = { type: 'workflow' as const, namespace: temporal.client.options.namespace, workflowId };
  const starts: number[] = [];
  for (const event of (await handle.fetchHistory()).events ?? []) {
    const payloads = event.workflowExecutionUpdateCompletedEventAttributes?.outcome?.success?.payloads;
    if (!payloads?.length) continue;
    const [opened] = await openedWith(converter, payloads, context);
    // A node's batch of asks (N4) is answered with a list, one result an ask; an older node's single ask, with one.
    const answered = converter.payloadConverter.fromPayload(opened) as unknown;
    for (const result of (Array.isArray(answered) ? answered : [answered]) as Array<{ ok?: boolean; at?: number }>)
      if (result?.ok && typeof result.at === 'number') starts.push(result.at);
  }
  return starts.sort((x, y) => x - y);
}

async function twoNodes(config: Parameters<typeof createNode>[0]['config']): Promise<[Oz0Node, Oz0Node]> {
  return Promise.all([
    createNode({ config, logger, name: uniqueId('node-a') }),
    createNode({ config, logger, name: uniqueId('node-b') }),
  ]);
}

test('F3: a cap on running calls holds exactly across two nodes; the same flood without a cap runs past it', async () => {
  const capped = uniqueId('capped');
  const free = uniqueId('free');
  const { config, log } = setup({ [capped]: { limits: { maxRunningCalls: 3 } } });
  const [a, b] = await twoNodes(config);
  const traces = await a.runUntil(() =>
    b.runUntil(async () => {
      const jobs = await startJobs(config.temporal.taskQueue, Array(12).fill(hangJob(capped, 400)), 'cap');
      const out = await Promise.all(jobs.map((h) => h.result() as Promise<JobTrace>));
      const controls = await startJobs(config.temporal.taskQueue, Array(12).fill(hangJob(free, 400)), 'free');
      await Promise.all(controls.map((h) => h.result()));
      return out;
    }),
  );
  // Every call ran, each once; never more than three at once (and three at once, so the cap is what held it).
  const starts = readReceived(log).filter((e) => e.event === 'start' && String(e.key).startsWith('cap-'));
  expect(new Set(starts.map((e) => e.key)).size).toBe(12);
  expect(starts).toHaveLength(12);
  expect(mostAtOnce(log, 'cap-')).toBe(3);
  // The control, on the same two nodes: the same flood with no cap runs more at once.
  expect(mostAtOnce(log, 'free-')).toBeGreaterThan(3);
  // T5: the limiter's history (its asks, gives, turns and claims) replays as it ran: what a node evicting it meets.
  const history = await temporal.client.workflow.getHandle(sharesWorkflowId(capped)).fetchHistory();
  const { dataConverter } = processDataOf(config);
  await Worker.runReplayHistory({ workflowBundle: await workflowBundle(false), dataConverter }, history, 'limiter');
  if (process.env.OZ0_RECORD_HISTORY)
    fs.writeFileSync(process.env.OZ0_RECORD_HISTORY, proto.api.history.v1.History.encode(history).finish());
  // The calls that waited say so in their trace: why, and how long.
  const waited = traces.flatMap((t) => callsOf(t)).filter((s) => s.waited?.length);
  expect(waited.length).toBeGreaterThan(0);
  for (const step of waited) {
    expect(step.waited![0]).toMatchObject({
      for: 'turn',
      why: expect.stringContaining(`${capped}'s cap of 3 running calls`),
    });
    expect(step.waited![0].ms).toBeGreaterThan(0);
    // A wait uses no attempt: the call made exactly one.
    expect(step.attempts).toEqual([expect.objectContaining({ attempt: 1, outcome: 'ok' })]);
  }
  // N4: a call whose turn came is scheduled one step ahead of its job's priority (a permit is held for it), and starts
  // without waiting for its claim: the node claims the grant on the way, and the server saw the call before the limiter
  // had answered the claim.
  const claims = await claimedAt(sharesWorkflowId(capped));
  const callStart = new Map(starts.map((e) => [String(e.key), e.t as number]));
  for (const { jobId } of traces.filter((t) => callsOf(t).some((s) => s.waited?.length))) {
    const events = (await temporal.client.workflow.getHandle(jobId).fetchHistory()).events ?? [];
    const keys = events
      .flatMap((e) => e.activityTaskScheduledEventAttributes ?? [])
      .map((a) => a.priority?.priorityKey);
    expect([keys[0] ?? 0, keys.at(-1)]).toEqual([0, DEFAULT_PRIORITY - 1]);
    const key = callsOf(traces.find((t) => t.jobId === jobId)!)[0].key;
    expect(callStart.get(key)).toBeLessThan(claims.get(key)!);
  }
}, 120_000);

/** When a tenant's limiter answered each call's last ask (its claim, for a call whose turn came), by the call's key. */
async function claimedAt(workflowId: string): Promise<Map<string, number>> {
  const handle = temporal.client.workflow.getHandle(workflowId);
  const converter = temporal.client.options.loadedDataConverter;
  const context = { type: 'workflow' as const, namespace: temporal.client.options.namespace, workflowId };
  const events = (await handle.fetchHistory()).events ?? [];
  const answered = new Map<string, number>();
  for (const e of events) {
    const done = e.workflowExecutionUpdateCompletedEventAttributes;
    if (done) answered.set(done.meta?.updateId ?? '', timestampMs(e.eventTime));
  }
  const at = new Map<string, number>();
  for (const e of events) {
    const accepted = e.workflowExecutionUpdateAcceptedEventAttributes?.acceptedRequest;
    const payloads = accepted?.input?.args?.payloads;
    if (!payloads?.length || !accepted?.input?.name?.startsWith('take')) continue;
    const [opened] = await openedWith(converter, payloads, context);
    const asks = converter.payloadConverter.fromPayload(opened) as TakeRequest | TakeRequest[];
    for (const ask of Array.isArray(asks) ? asks : [asks])
      at.set(ask.call.key, answered.get(accepted.meta?.updateId ?? '') ?? Infinity);
  }
  return at;
}

test('F3: a rate spaces a tenant’s calls across two nodes (5 a second); the same calls without it start at once', async () => {
  const rated = uniqueId('rated');
  const free = uniqueId('free');
  const { config, log } = setup({ [rated]: { limits: { callsPerSecond: 5 } } });
  const [a, b] = await twoNodes(config);
  await a.runUntil(() =>
    b.runUntil(async () => {
      // The control first: it also starts both nodes' servers, whose first requests are slower than the rest.
      const controls = await startJobs(config.temporal.taskQueue, Array(10).fill(hangJob(free, 10)), 'free');
      await Promise.all(controls.map((h) => h.result()));
      const jobs = await startJobs(config.temporal.taskQueue, Array(10).fill(hangJob(rated, 10)), 'rate');
      await Promise.all(jobs.map((h) => h.result()));
    }),
  );
  const times = (prefix: string) =>
    readReceived(log)
      .filter((e) => e.event === 'start' && String(e.key).startsWith(prefix))
      .map((e) => e.t as number)
      .sort((x, y) => x - y);
  const rate = times('rate-');
  expect(rate).toHaveLength(10);
  // The limiter gave each of the ten a start 1/5 s after the one before, whichever node asked: read from its history.
  const given = await givenStarts(sharesWorkflowId(rated));
  expect(given).toHaveLength(10);
  for (let i = 1; i < given.length; i++) expect(given[i] - given[i - 1]).toBeGreaterThanOrEqual(200);
  // The servers see them so, give or take each request's way there (a node late to one start brings it nearer the
  // next, never further ahead): 5 a second over the whole run, never a burst in a second.
  expect(rate[rate.length - 1] - rate[0]).toBeGreaterThan(9 * 200 - 150);
  for (const t of rate) expect(rate.filter((u) => u >= t && u < t + 1000).length).toBeLessThanOrEqual(6);
  for (let i = 0; i < rate.length; i++) expect(rate[i]).toBeGreaterThanOrEqual(given[i] - 5);
  // The control: without the rate, the same calls start in a burst, more than 5 within a second.
  const control = times('free-');
  const burst = Math.max(...control.map((t) => control.filter((u) => u >= t && u < t + 1000).length));
  expect(burst).toBeGreaterThan(5);
}, 120_000);

test("F3: a server's cap spares the service behind it; the tenant's other servers are not held by it", async () => {
  const tenant = uniqueId('t');
  const { config, log } = setup({ [tenant]: { limits: { servers: { probe: { maxRunningCalls: 2 } } } } });
  const node = await createNode({ config, logger });
  const traces = await node.runUntil(async () => {
    const jobs = await startJobs(config.temporal.taskQueue, Array(6).fill(hangJob(tenant, 300)), 'srv');
    return Promise.all(jobs.map((h) => h.result() as Promise<JobTrace>));
  });
  expect(mostAtOnce(log)).toBe(2);
  const why = traces.flatMap((t) => callsOf(t)).flatMap((s) => s.waited ?? [])[0]?.why;
  expect(why).toContain(`${tenant}'s cap of 2 running calls of probe`);
}, 60_000);

/** A cap of one taken by a long call, and a second call in line behind it. */
async function oneInLine(tenant: string, log: string, taskQueue: string) {
  const [first] = await startJobs(taskQueue, [hangJob(tenant, 20_000)], 'first');
  await eventually(() => (readReceived(log).some((e) => e.event === 'start') ? true : undefined), 20_000, 'the first');
  const [second] = await startJobs(taskQueue, [hangJob(tenant, 100)], 'second');
  // The second waits in line: its limiter says so.
  await eventually(
    async () => ((await limiterStatus(temporal.client, tenant))?.queue === 1 ? true : undefined),
    20_000,
    'the second in line',
  );
  return { first, second };
}

test('F3: a job cancelled while its call waits in line ends CANCELED, nothing sent, and leaves the line', async () => {
  const tenant = uniqueId('t');
  const { config, log } = setup({ [tenant]: { limits: { maxRunningCalls: 1 } } });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const { first, second } = await oneInLine(tenant, log, config.temporal.taskQueue);
    const cancelledAt = Date.now();
    await second.cancel();
    await expect(second.result()).rejects.toThrow();
    expect(Date.now() - cancelledAt).toBeLessThan(5000);
    expect((await second.describe()).status.name).toBe('CANCELLED');
    const step = callsOf(await second.query<JobTrace>('trace'))[0];
    expect(step.attempts.at(-1)).toMatchObject({
      outcome: 'cancelled',
      note: expect.stringContaining('nothing was sent'),
    });
    expect(step.waited?.[0]).toMatchObject({ for: 'turn' });
    // Out of line; the first call runs on.
    await eventually(async () => ((await limiterStatus(temporal.client, tenant))?.queue === 0 ? true : undefined));
    await first.cancel();
  });
  // The server never saw the second job's call.
  expect(readReceived(log).filter((e) => e.event === 'start' && String(e.key).startsWith('second'))).toHaveLength(0);
}, 90_000);

test('F3, C5: a kill switch reaches a call waiting in line: it is refused at once, nothing sent', async () => {
  const tenant = uniqueId('t');
  const { config, log } = setup({ [tenant]: { limits: { maxRunningCalls: 1 } } });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const { first, second } = await oneInLine(tenant, log, config.temporal.taskQueue);
    const killedAt = Date.now();
    await changePolicy(policyTargetOf(config, temporal.client), tenant, killUpdate, ['probe.hang']);
    const trace = (await second.result()) as JobTrace;
    expect(Date.now() - killedAt).toBeLessThan(5000);
    const step = callsOf(trace)[0];
    expect(step.result.isError).toBe(true);
    expect(step.attempts).toEqual([
      expect.objectContaining({ outcome: 'refused', note: expect.stringContaining('killed') }),
    ]);
    // The running call is stopped by the same switch (C5).
    expect(callsOf((await first.result()) as JobTrace)[0].attempts.at(-1)?.outcome).toBe('killed');
  });
  expect(readReceived(log).filter((e) => e.event === 'start' && String(e.key).startsWith('second'))).toHaveLength(0);
}, 90_000);

test('F5: the node’s series say who runs and who waits; `oz0 tenant set` raises a cap live, and the calls in line start within seconds', async () => {
  const tenant = uniqueId('t');
  const { config, log } = setup({ [tenant]: { limits: { maxRunningCalls: 1 } } }, { metricsPort: 0 });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const jobs = await startJobs(config.temporal.taskQueue, Array(4).fill(hangJob(tenant, 15_000)), 'live');
    await eventually(
      async () => ((await limiterStatus(temporal.client, tenant))?.queue === 3 ? true : undefined),
      20_000,
      'three in line',
    );
    await eventually(() => (mostAtOnce(log) === 1 ? true : undefined), 10_000, 'the first call');
    // O1, F5: by tenant, one call running on the node, three in line, and each attempt's wait in Temporal's queue.
    const series = await eventually(async () => {
      const text = withoutReleaseLabels(await (await fetch(node.metricsUrl!)).text());
      return text.includes(`oz0_tenant_calls_waiting{tenant="${tenant}"} 3`) ? text : undefined;
    });
    expect(series).toContain(`oz0_tenant_calls_running{tenant="${tenant}"} 1`);
    expect(series).toMatch(new RegExp(`oz0_call_schedule_to_start_seconds_count\\{tenant="${tenant}"\\} [4-9]`));
    expect(series).toMatch(new RegExp(`oz0_call_waits_total\\{tenant="${tenant}",for="turn"\\} 3`));
    const setAt = Date.now();
    await setShares(temporal.client, policyTargetOf(config, temporal.client), config.temporal, tenant, {
      maxRunningCalls: 4,
    });
    await eventually(() => (readReceived(log).filter((e) => e.event === 'start').length === 4 ? true : undefined));
    expect(Date.now() - setAt).toBeLessThan(5000);
    await Promise.all(jobs.map((h) => h.cancel()));
  });
}, 90_000);

test("F4: a live session's call (an agent waits on it) goes ahead of scripted calls in its tenant's line", async () => {
  const tenant = uniqueId('t');
  const { config, log } = setup({ [tenant]: { limits: { maxRunningCalls: 1 } } });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    // The holder keeps the one permit while four calls get in line: 15 s, as opening a session on a loaded machine
    // took past 3 s (the live call then found the holder gone and a scripted call running, and never made a fourth).
    const [holder] = await startJobs(config.temporal.taskQueue, [hangJob(tenant, 15_000)], 'holder');
    await eventually(() => (mostAtOnce(log) === 1 ? true : undefined), 20_000, 'the first call');
    const scripted = await startJobs(config.temporal.taskQueue, Array(3).fill(hangJob(tenant, 50)), 'scripted');
    await eventually(
      async () => ((await limiterStatus(temporal.client, tenant))?.queue === 3 ? true : undefined),
      20_000,
      'three scripted calls in line',
    );
    const [live] = await startJobs(
      config.temporal.taskQueue,
      [{ tenant, steps: [{ session: { external: true } }] }],
      'live',
    );
    const session = await openSession(temporal.client, live.workflowId);
    const answer = session.callTool('probe.hang', { ms: 50 });
    await eventually(
      async () => ((await limiterStatus(temporal.client, tenant))?.queue === 4 ? true : undefined),
      20_000,
      'the live call in line',
    );
    expect((await answer).isError).toBeFalsy();
    await session.close({ done: true });
    await Promise.all([holder, live, ...scripted].map((h) => h.result()));
  });
  // After the call that held the permit, the live session's call was the first to start.
  const order = readReceived(log)
    .filter((e) => e.event === 'start')
    .map((e) => String(e.key).split('/')[0].split('-')[0]);
  expect(order).toEqual(['holder', 'live', 'scripted', 'scripted', 'scripted']);
}, 90_000);

test('F5: `oz0 tenant set` and `oz0 tenant status` as a person runs them: the table, --json with every field, bad input named', async () => {
  const tenant = uniqueId('t');
  const { config, log } = setup({ [tenant]: { limits: { maxRunningCalls: 1 } } });
  const file = path.join(tmpDir(), 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      temporal: config.temporal,
      servers: { probe: { command: 'node', args: [fixture('probe-server.js')] } },
      tenants: { [tenant]: { limits: { maxRunningCalls: 1 } } },
    }),
  );
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    // Calls that hang until the test cancels them: its CLI runs take a few seconds each on a loaded machine, and a
    // call that ended meanwhile would change the counts it reads (found: a 10 s call ended before the JSON read).
    const jobs = await startJobs(config.temporal.taskQueue, Array(3).fill(hangJob(tenant, 120_000)), 'cli');
    await eventually(async () => ((await limiterStatus(temporal.client, tenant))?.queue === 2 ? true : undefined));
    await eventually(() => (mostAtOnce(log) === 1 ? true : undefined));
    const set = await oz0([
      'tenant',
      'set',
      tenant,
      '--weight',
      '3',
      '--server',
      'probe',
      '--rate',
      '50',
      '--config',
      file,
    ]);
    expect(set.stderr).toContain('--server sets a server');
    expect(set.code).toBe(2);
    const ok = await oz0(['tenant', 'set', tenant, '--weight', '3', '--config', file]);
    expect(ok.stdout).toMatch(
      new RegExp(`^${tenant} \\(policy version \\d+\\): weight 3, priority 3-5, cap 1, rate none`),
    );
    const server = await oz0([
      'tenant',
      'set',
      tenant,
      '--server',
      'probe',
      '--rate',
      '50',
      '--json',
      '--config',
      file,
    ]);
    expect(JSON.parse(server.stdout)).toMatchObject({
      tenant,
      shares: { weight: 3, limits: { maxRunningCalls: 1, servers: { probe: { callsPerSecond: 50 } } } },
    });
    const table = await oz0(['tenant', 'status', tenant, '--config', file]);
    const row = table.stdout.split('\n').find((l) => l.startsWith(tenant))!;
    // weight, priority, jobs, running, queued (in Temporal), in line, cap (held of), rate
    expect(row.split(/\s{2,}/)).toEqual([tenant, '3', '3-5', '3', '1', '0', '2', '1 of 1', '-']);
    expect(table.stdout).toContain(`${tenant}'s calls of probe: cap -, rate 50/s`);
    const json = JSON.parse((await oz0(['tenant', 'status', tenant, '--json', '--config', file])).stdout);
    expect(json).toMatchObject({
      tenant,
      source: 'set',
      shares: { weight: 3, maxPriority: 3 },
      jobs: 3,
      calls: { running: 1, queued: 0, jobsLooked: 3 },
      limiter: { queue: 2, scopes: expect.arrayContaining([{ scope: '*', running: 1, waiting: 2 }]) },
    });
    // The weight is in Temporal's config of the shared queue, where dispatch reads it.
    expect(await weightsOn(temporal.client, config.temporal.taskQueue)).toMatchObject({ [tenant]: 3 });
    for (const bad of [
      ['--weight', '0'],
      ['--max-running', 'lots'],
      ['--max-priority', '9'],
    ]) {
      const refused = await oz0(['tenant', 'set', tenant, ...bad, '--config', file]);
      expect({ bad, code: refused.code }).toEqual({ bad, code: 2 });
      expect(refused.stderr).toContain(bad[0]);
    }
    await Promise.all(jobs.map((h) => h.cancel()));
  });
}, 90_000);

test('F3: a call that runs longer than its node’s permits are held keeps its permit (the node renews it); idle, the permit goes back', async () => {
  const tenant = uniqueId('t');
  // Permits held 3 s without a renewal; the call runs 8 s.
  const { config, log } = setup({ [tenant]: { limits: { maxRunningCalls: 1 } } }, { permitHoldSeconds: 3 });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const [long, next] = await startJobs(
      config.temporal.taskQueue,
      [hangJob(tenant, 8000), hangJob(tenant, 10)],
      'held',
    );
    await Promise.all([long.result(), next.result()]);
    // Idle a second, the node's permit goes back: nothing is held for it.
    await eventually(async () => {
      const scopes = (await limiterStatus(temporal.client, tenant))?.scopes;
      return scopes?.[0]?.running === 0 ? scopes : undefined;
    }, 10_000);
  });
  // Never both at once: the second started once the first ended, not once 3 s had passed.
  expect(mostAtOnce(log)).toBe(1);
  const events = readReceived(log).filter((e) => e.tool === 'hang');
  expect(events.map((e) => e.event)).toEqual(['start', 'end', 'start', 'end']);
}, 60_000);

test('F3: a permit whose ask was slow still goes back when its call ends (the node forgets no tenant while a call of it asks)', async () => {
  const tenant = uniqueId('t');
  // Permits held 60 s without a renewal: a permit the node lost track of would stay counted that long.
  const { config } = setup({ [tenant]: { limits: { maxRunningCalls: 1 } } }, { permitHoldSeconds: 60 });
  const node = await createNode({ config, logger });
  // The node's first ask of the limiter takes 2.5 s on its way (a loaded Temporal): its renewals run meanwhile.
  const ask = WorkflowClient.prototype.executeUpdateWithStart;
  let slowed = 0;
  const spy = jest.spyOn(WorkflowClient.prototype, 'executeUpdateWithStart').mockImplementation(async function (
    this: WorkflowClient,
    ...args: Parameters<WorkflowClient['executeUpdateWithStart']>
  ) {
    if (slowed++ === 0) await new Promise((r) => setTimeout(r, 2500));
    return ask.apply(this, args);
  } as typeof ask);
  try {
    await node.runUntil(async () => {
      const [job] = await startJobs(config.temporal.taskQueue, [hangJob(tenant, 10)], 'slow-ask');
      await job.result();
      // Idle a second, the node gives its permit back: the limiter counts none running, long before 60 s.
      const scopes = await eventually(async () => {
        const found = (await limiterStatus(temporal.client, tenant))?.scopes;
        return found?.[0]?.running === 0 ? found : undefined;
      }, 8000);
      expect(scopes[0]).toMatchObject({ running: 0, waiting: 0 });
    });
  } finally {
    spy.mockRestore();
  }
  expect(slowed).toBeGreaterThan(0);
}, 60_000);
