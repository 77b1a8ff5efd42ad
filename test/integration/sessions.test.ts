/**
 * Harness sessions on real worker processes (T4, K3-K6): a session is pinned to one node's own queue; when
 * that node is lost (kill -9 of the node and its servers), a fresh session of the same number starts on
 * another node by itself, makes the same calls under the same keys, and the ledger makes each write once.
 * A lost session with a call that may not be made again stops the job, naming the call.
 */
import { PayloadOwners, processDataOf } from '../../data';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { NativeConnection, Worker } from '@temporalio/worker';
import { readReceived } from '../../examples/common';
import { readKeyStore } from '../../plugin';
import type { JobTrace } from '../../model/job';
import type { SessionPlan } from '../../model/activities';
import { workflowBundle } from '../../worker/bundle';
import { createActivities } from '../../activities';
import type { ActivityDeps } from '../../activities';
import { createNode } from '../../worker/node';
import {
  attributesOf,
  descendants,
  eventually,
  example,
  fixture,
  killTree,
  logger,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import type { JobSpec } from '../../model/schemas';
import { callsOf } from '../../model/job';
import { timestampMs } from '../../common/time';

const temporal = useTemporal();

function setup() {
  const dir = tmpDir();
  const log = path.join(dir, 'received.jsonl');
  const ledger = path.join(dir, 'ledger.db');
  const servers = {
    ledger: { command: 'node', args: [example('ledger')], env: { LEDGER_FILE: ledger, OZ0_RECEIVED_LOG: log } },
    probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } },
  };
  const node = { heartbeatTimeoutSeconds: 4 };
  const config = temporal.config({ servers, node });
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({ temporal: config.temporal, servers, node: { ...node, stateDir: path.join(dir, 'state') } }),
  );
  return { config, file, log, ledger };
}

/** The worker whose descendants include the server process `pid`. */
function workerOf(pid: number, candidates: { proc: ChildProcess; name: string }[]) {
  return candidates.find((w) => descendants(w.proc.pid!).includes(pid));
}

test('T4: a session runs all its calls on one node, through that node’s own task queue', async () => {
  const { config } = setup();
  const a = await createNode({ config, logger, name: 'pin-a' });
  const b = await createNode({ config, logger, name: 'pin-b' });
  await a.runUntil(() =>
    b.runUntil(async () => {
      const handle = await temporal.client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId('pin'),
        args: [
          {
            tenant: 'acme',
            steps: [{ session: [{ call: 'probe.probe' }, { call: 'probe.probe' }, { call: 'probe.probe' }] }],
          },
        ],
      });
      const trace: JobTrace = await handle.result();
      const nodes = new Set(callsOf(trace).map((s) => s.node));
      expect(nodes.size).toBe(1);
      const pids = new Set(callsOf(trace).map((s) => (s.result.structuredContent as { pid: number }).pid));
      expect(pids.size).toBe(1);
      const history = await handle.fetchHistory();
      const queues = (history.events ?? [])
        .map((e) => e.activityTaskScheduledEventAttributes)
        .filter((x) => x?.activityType?.name === 'callTool')
        .map((x) => x!.taskQueue!.name!);
      const pinned = [a, b].find((n) => n.identity.id === [...nodes][0])!;
      expect(new Set(queues)).toEqual(new Set([pinned.identity.queue]));
    }),
  );
});

// Several trials, each losing the node at another moment of the session.
test.each([[0], [700], [1600]])(
  'T4/K4: a node lost %d ms into a session: a fresh session on another node by itself, same keys, every write once',
  async (delay) => {
    const { file, log, ledger } = setup();
    const [a, b] = await temporal.startWorkers(file, 'node-a', 'node-b');
    const order = uniqueId('o');
    const spec: JobSpec = {
      tenant: 'acme',
      steps: [
        {
          session: [1, 2, 3].map((i) => ({
            call: 'ledger.slow_charge',
            args: { order_id: `${order}-${i}`, amount: i, ms: 1200 },
          })),
        },
      ],
    };
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: JSON.parse(fs.readFileSync(file, 'utf8')).temporal.taskQueue,
      workflowId: uniqueId('lost'),
      args: [spec],
    });
    // Let the session make its first write, then lose its node (the node and its servers, at once).
    const first = await eventually(() => readReceived(log).find((r) => r.tool === 'slow_charge'), 30_000, 'first call');
    await eventually(() => (readKeyStore(ledger).length > 0 ? true : undefined), 20_000, 'first write');
    await new Promise((r) => setTimeout(r, delay));
    const victim = workerOf(first.pid as number, [a, b])!;
    const survivor = victim === a ? b : a;
    // Who sent a call is told by the server that got it, not by the time: a call the victim sent in the last
    // milliseconds before it died can be logged just after the kill.
    const victimPids = new Set(descendants(victim.proc.pid!));
    const lostAt = Date.now();
    killTree(victim.proc.pid!);
    const trace: JobTrace = await handle.result();
    const received = readReceived(log).filter((r) => r.tool === 'slow_charge' && r.key && !r.event);
    const before = received.filter((r) => victimPids.has(r.pid as number));
    const fresh = received.filter((r) => !victimPids.has(r.pid as number));
    // Detected within the heartbeat timeout (4 s): the session's lease timed out then.
    const history = await handle.fetchHistory();
    const leaseTimedOut = (history.events ?? []).find((e) => e.activityTaskTimedOutEventAttributes);
    const detectedAfter = timestampMs(leaseTimedOut!.eventTime) - lostAt;
    expect(detectedAfter).toBeLessThan(4000 + 1500);
    // Then the fresh session started on the other node by itself (its job moved off the dead node's sticky queue
    // too, after its 3 s): the detection, that, a plan and a lease, and the harness's start. A bound of liveness, not
    // of speed (that is bench/'s): well before any minute-long timeout would have moved it; on a fresh clone's full
    // run, both cores busy, it took 12.0 s once.
    expect((fresh[0].t as number) - lostAt).toBeLessThan(20_000);
    // The fresh session made the session's calls again from the start, under the same keys.
    const keysBefore = [...new Set(before.map((r) => r.key))];
    const keysAfter = [...new Set(fresh.map((r) => r.key))];
    expect(keysAfter.slice(0, keysBefore.length)).toEqual(keysBefore);
    expect(keysAfter.length).toBeGreaterThan(0);
    expect(new Set([...keysBefore, ...keysAfter]).size).toBe(3);
    // Exactly one charge per key in the ledger (the dead node's servers and the survivor's share it).
    const writes = readKeyStore(ledger);
    expect(writes.map((w) => w.key).sort()).toEqual([...new Set([...keysBefore, ...keysAfter])].sort());
    // The trace shows the lost call and the fresh session's calls, on the other node.
    expect(callsOf(trace).some((s) => s.attempts.some((x) => x.outcome === 'lost'))).toBe(true);
    const freshSteps = callsOf(trace).filter((s) => s.sessionRun === 2);
    expect(freshSteps.length).toBe(3);
    expect(new Set(freshSteps.map((s) => s.node))).toEqual(new Set([survivor.name]));
    expect(freshSteps.every((s) => !s.result.isError)).toBe(true);
    survivor.proc.kill('SIGTERM');
    await survivor.exited;
  },
  120_000,
);

test('T4: a lost session that made a call which may not be made again stops the job, naming the call as "may have run"', async () => {
  const { file, log } = setup();
  const [a, b] = await temporal.startWorkers(file, 'node-c', 'node-d');
  const handle = await temporal.client.workflow.start('job', {
    taskQueue: JSON.parse(fs.readFileSync(file, 'utf8')).temporal.taskQueue,
    workflowId: uniqueId('risky'),
    args: [
      { tenant: 'acme', steps: [{ session: [{ call: 'probe.probe' }, { call: 'probe.hang', args: { ms: 60_000 } }] }] },
    ],
  });
  const started = await eventually(() => readReceived(log).find((r) => r.event === 'start'), 30_000, 'hang started');
  const victim = workerOf(started.pid as number, [a, b])!;
  killTree(victim.proc.pid!);
  const err = await handle.result().catch((e: unknown) => e);
  expect(err).toBeInstanceOf(WorkflowFailedError);
  const message = ((err as WorkflowFailedError).cause as Error).message;
  expect(message).toContain('probe.hang');
  expect(message).toContain(`key ${handle.workflowId}/`);
  expect(message).toContain('may have run');
  // T3: the failed job says so on its run, for the tenant's filter.
  expect(attributesOf(await handle.describe())).toMatchObject({ Oz0Status: 'FAILED', Oz0Tenant: 'acme' });
  for (const w of [a, b]) if (w.proc.exitCode === null) w.proc.kill('SIGTERM');
}, 120_000);

test('T4: a node chosen for a session that dies before it picks the session up is taken as lost after its pickup time: a fresh session on another node, every write once', async () => {
  const { config, ledger } = setup();
  // The ghost: a worker on the shared queue that runs the job's workflow and answers describeTools naming a queue
  // of its own, then is gone — as a node killed between its answer and its first poll of its own queue.
  // The live node is made first (it registers the search attributes) and runs once the ghost is gone.
  const node = await createNode({ config, logger });
  const ghostQueue = `${config.temporal.taskQueue}/node/ghost`;
  const described = new Set<string>();
  const connection = await NativeConnection.connect({ address: temporal.server.address });
  const ghost = await Worker.create({
    connection,
    namespace: config.temporal.namespace,
    taskQueue: config.temporal.taskQueue,
    workflowBundle: await workflowBundle(false),
    // oz0's data converter, as the node's: the job's payloads are sealed with its tenant's key (D4).
    dataConverter: processDataOf(config).dataConverter,
    stickyQueueScheduleToStartTimeout: '3s',
    activities: {
      // What the job's workflow asks of any node before its session (it reads only the config).
      resolveJobSettings: createActivities({ config, owners: new PayloadOwners() } as unknown as ActivityDeps)
        .resolveJobSettings,
      describeTools: async (jobId: string, _tenant: string, tools: string[]): Promise<SessionPlan> => {
        described.add(jobId);
        const every = (v: boolean) => Object.fromEntries(tools.map((t) => [t, v]));
        return {
          idempotent: every(true),
          mayRetry: every(true),
          settings: {},
          node: { id: 'ghost', queue: ghostQueue },
        };
      },
    },
  });
  const order = uniqueId('o');
  const calls = [1, 2].map((i) => ({ call: 'ledger.charge', args: { order_id: `${order}-${i}`, amount: i } }));
  const handle = await temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('ghost'),
    args: [{ tenant: 'acme', steps: [{ session: calls }] }],
  });
  // The ghost answers, and the job schedules the session's lease on the ghost's queue; then the ghost is gone.
  await ghost.runUntil(async () => {
    await eventually(
      async () => {
        const events = (await handle.fetchHistory()).events ?? [];
        const lease = events.find((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'holdSession');
        return described.has(handle.workflowId) && lease ? true : undefined;
      },
      30_000,
      'the lease on the ghost’s queue',
    );
  });
  await connection.close();
  const trace: JobTrace = await node.runUntil(() => handle.result());
  // The first run's first call never started: it is lost with the ghost, after the lease's pickup time (15 s).
  const lost = callsOf(trace).find((s) => s.sessionRun === 1)!;
  expect(lost.attempts.at(-1)).toMatchObject({
    outcome: 'lost',
    note: expect.stringContaining('node ghost was lost (it did not pick up the session within 15 s)'),
  });
  // The fresh session ran every call on the live node, and the ledger made each write once.
  const fresh = callsOf(trace).filter((s) => s.sessionRun === 2);
  expect(fresh.map((s) => [s.tool, s.result.isError])).toEqual([
    ['ledger.charge', false],
    ['ledger.charge', false],
  ]);
  expect(new Set(fresh.map((s) => s.node))).toEqual(new Set([node.identity.id]));
  expect(
    readKeyStore(ledger)
      .map((w) => w.key)
      .sort(),
  ).toEqual(fresh.map((s) => s.key).sort());
}, 120_000);
