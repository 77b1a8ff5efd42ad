/**
 * C1-C4 by the job's own history (issue 36.4): a node follows the history of each job it runs a call of (once the
 * call has run past `node.jobFollowAfterMs`), and a job's cancel, read there, stops the job's running calls without
 * waiting for the job's workflow task. These tests hold that task: the node under test runs calls only
 * (`workflows: false`), and the jobs' workflows run on plain SDK workers the test stops once the calls run — so a
 * call stopped while they are stopped was stopped by the follow, which the job's history shows (no workflow task
 * started after the cancel request, no activity cancel). Temporal's own cancel still settles each call once a
 * workflow worker runs again.
 */
import { PayloadOwners, processDataOf } from '../../data';
import path from 'node:path';
import { randomUUID } from 'node:crypto';
import { NativeConnection, Worker } from '@temporalio/worker';
import { readReceived, serveHttp } from '../../examples/common';
import { createReader } from '../../examples/reader';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import { workflowBundle } from '../../worker/bundle';
import { createActivities } from '../../activities';
import type { ActivityDeps } from '../../activities';
import { JobFollows } from '../../activities/call/job-follows';
import type { LoadedConfig } from '../../common/config';
import type { JobSpec } from '../../model/schemas';
import { traceQuery } from '../../model/messages';
import { callsOf } from '../../model/job';
import { approve, eventually, fixture, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { sandboxed, sharedFile } from '../helpers/sandbox';

const temporal = useTemporal();

/** Long enough for a stop that was going to come to have come, on a loaded machine. */
const QUIET_MS = 4000;

/** The calls that wait to be cancelled: one attempt each, and time enough. */
const TOOLS = ['probe.hang', 'box.hang', 'search.sleep'];

/** A plugin probe (`probe`), a sandboxed one (`box`), each with a log of its own, and any remote servers. */
function probeConfig(extra: { node?: Record<string, unknown>; servers?: Record<string, unknown> } = {}) {
  const { dir, file: boxLog } = sharedFile('box.jsonl');
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: {
      probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } },
      box: {
        command: 'node',
        args: [fixture('probe-server.js')],
        sandbox: sandboxed({ write: [dir] }),
        env: { PROBE_LOG: boxLog },
      },
      ...extra.servers,
    },
    tools: Object.fromEntries(TOOLS.map((t) => [t, { timeoutSeconds: 120, maxAttempts: 1 }])),
    node: extra.node ?? {},
  });
  return { config, log, boxLog };
}

/** The jobs' and the policies' workflows, on plain SDK workers of their own that the test stops and starts again. */
async function workflowWorkers(config: LoadedConfig) {
  const connection = await NativeConnection.connect({ address: temporal.server.address });
  const bundle = await workflowBundle(false);
  // oz0's data converter, as a node's workers have it: the jobs' payloads are sealed with their tenants' keys (D4).
  const { dataConverter } = processDataOf(config);
  let running: Array<{ worker: Worker; done: Promise<void> }> = [];
  const start = async () => {
    const queues = [config.temporal.taskQueue, config.temporal.policyTaskQueue];
    running = await Promise.all(
      queues.map(async (taskQueue) => {
        const worker = await Worker.create({
          connection,
          namespace: temporal.server.namespace,
          taskQueue,
          workflowBundle: bundle,
          dataConverter,
          // The job's one local activity (its settings, from the config) runs with its workflow task; its calls never
          // run here (no activity task is polled).
          activities: createActivities({ config, owners: new PayloadOwners() } as ActivityDeps),
          enableNonLocalActivities: false,
          stickyQueueScheduleToStartTimeout: '1s',
        });
        return { worker, done: worker.run() };
      }),
    );
  };
  const stop = async () => {
    for (const { worker } of running) worker.shutdown();
    await Promise.all(running.map((r) => r.done));
    running = [];
  };
  return { start, stop, close: async () => (await stop(), await connection.close()) };
}

/** A node that runs calls only, beside workflow workers the test holds; `fn` gets both. */
async function withHeldNode<T>(
  config: LoadedConfig,
  fn: (node: Oz0Node, workflows: Awaited<ReturnType<typeof workflowWorkers>>) => Promise<T>,
): Promise<T> {
  const node = await createNode({ config, logger, workflows: false });
  const workflows = await workflowWorkers(config);
  await workflows.start();
  try {
    return await node.runUntil(() => fn(node, workflows));
  } finally {
    await workflows.close();
  }
}

function startJob(config: LoadedConfig, spec: JobSpec) {
  return temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('follow'),
    args: [spec],
  });
}

const hang = (tenant: string, tool = 'probe.hang'): JobSpec => ({
  tenant,
  steps: [{ call: tool, args: { ms: 120_000 } }],
});

/** The server's record of the job's call starting (its key is `<job>/<activity>`, K2). */
function started(log: string, jobId: string) {
  return eventually(() => readReceived(log).find((r) => r.event === 'start' && String(r.key).startsWith(`${jobId}/`)));
}

function cancelledRecord(log: string, requestId: unknown) {
  return readReceived(log).find((r) => r.event === 'cancelled' && r.requestId === requestId);
}

/** The job's history after its cancel request: whether a workflow task started, and whether its activity's cancel was. */
async function afterCancelRequest(jobId: string) {
  const events = (await temporal.client.workflow.getHandle(jobId).fetchHistory()).events ?? [];
  const at = events.findIndex((e) => e.workflowExecutionCancelRequestedEventAttributes);
  const after = events.slice(at + 1);
  return {
    requested: at >= 0,
    taskStarted: after.some((e) => e.workflowTaskStartedEventAttributes),
    activityCancel: after.some((e) => e.activityTaskCancelRequestedEventAttributes),
  };
}

const HELD = { requested: true, taskStarted: false, activityCancel: false };

test("C1/C2/C3 by the job's history: with the job's workflow task held, the stdio, Streamable HTTP and sandboxed servers hear notifications/cancelled (the sandbox stopped) before any workflow task ran; another job's call runs on; then C4: each job CANCELED, one attempt, cancelled", async () => {
  const httpLog = path.join(tmpDir(), 'received.jsonl');
  process.env.OZ0_RECEIVED_LOG = httpLog;
  const mcp = await serveHttp(createReader({ stateFile: path.join(tmpDir(), 'seen.json') }), 0);
  try {
    const { config, log, boxLog } = probeConfig({ servers: { search: { url: mcp.url, protocol: '2025-11-25' } } });
    const tenant = uniqueId('t');
    await withHeldNode(config, async (node, workflows) => {
      await approve(temporal, config, tenant, 'search');
      const stdio = await startJob(config, hang(tenant));
      const box = await startJob(config, hang(tenant, 'box.hang'));
      const http = await startJob(config, hang(tenant, 'search.sleep'));
      const bystander = await startJob(config, hang(tenant));
      const calls = {
        stdio: await started(log, stdio.workflowId),
        box: await started(boxLog, box.workflowId),
        http: await started(httpLog, http.workflowId),
        bystander: await started(log, bystander.workflowId),
      };
      // Each running call's job is followed (one each, past the threshold), before the workflow tasks are held.
      await eventually(() => (node.follows.record.following === 4 ? true : undefined), 10_000, 'four follows');
      await workflows.stop();
      // A plain Temporal client's cancel, as the UI or `temporal workflow cancel` makes it.
      await Promise.all([stdio.cancel(), box.cancel(), http.cancel()]);
      const heard = {
        stdio: await eventually(() => cancelledRecord(log, calls.stdio.requestId), 30_000),
        box: await eventually(() => cancelledRecord(boxLog, calls.box.requestId), 30_000),
        http: await eventually(() => cancelledRecord(httpLog, calls.http.requestId), 30_000),
      };
      for (const record of Object.values(heard)) expect(record).toMatchObject({ reason: 'oz0: job cancelled' });
      // C3: the sandboxed server is stopped with its call, still before any workflow task.
      await eventually(() => readReceived(boxLog).find((r) => r.event === 'exit'), 30_000, 'the sandbox to stop');
      // Held: no workflow task has run since the cancels were requested, so it cannot have been the way.
      for (const h of [stdio, box, http]) expect(await afterCancelRequest(h.workflowId)).toEqual(HELD);
      expect(node.follows.record.stopped).toBe(3);
      // The positive control: the job nobody cancelled goes on (its call unstopped, its job running).
      await new Promise((r) => setTimeout(r, 1000));
      expect(cancelledRecord(log, calls.bystander.requestId)).toBeUndefined();
      // C4: until Temporal's own cancel settles them, the jobs stay open.
      expect((await stdio.describe()).status.name).toBe('RUNNING');

      await workflows.start();
      for (const h of [stdio, box, http]) {
        await expect(h.result()).rejects.toThrow();
        expect((await h.describe()).status.name).toBe('CANCELLED');
        expect(await afterCancelRequest(h.workflowId)).toMatchObject({ taskStarted: true, activityCancel: true });
        // Made once: Temporal's cancel settled the attempt the follow stopped, and no attempt followed it.
        const trace = await h.query(traceQuery);
        expect(callsOf(trace)[0].attempts).toEqual([
          expect.objectContaining({ attempt: 1, outcome: 'cancelled', note: 'oz0: job cancelled' }),
        ]);
      }
      const starts = (file: string, jobId: string) =>
        readReceived(file).filter((r) => r.event === 'start' && String(r.key).startsWith(`${jobId}/`));
      expect(starts(log, stdio.workflowId)).toHaveLength(1);
      expect(starts(boxLog, box.workflowId)).toHaveLength(1);
      expect(starts(httpLog, http.workflowId)).toHaveLength(1);
      expect(cancelledRecord(log, calls.bystander.requestId)).toBeUndefined();
      expect((await bystander.describe()).status.name).toBe('RUNNING');
      await bystander.cancel();
      await expect(bystander.result()).rejects.toThrow();
    });
  } finally {
    delete process.env.OZ0_RECEIVED_LOG;
    await mcp.close();
  }
});

test("C1 with following off (node.jobFollows: 0): the call is not stopped while the job's workflow task is held; once it runs, Temporal's way stops it and the job ends CANCELED", async () => {
  const { config, log } = probeConfig({ node: { jobFollows: 0 } });
  await withHeldNode(config, async (node, workflows) => {
    const handle = await startJob(config, hang('acme'));
    const start = await started(log, handle.workflowId);
    await workflows.stop();
    await handle.cancel();
    await new Promise((r) => setTimeout(r, QUIET_MS));
    expect(cancelledRecord(log, start.requestId)).toBeUndefined();
    expect(node.follows.record).toMatchObject({ started: 0, stopped: 0 });
    await workflows.start();
    const cancelled = await eventually(() => cancelledRecord(log, start.requestId), 30_000);
    expect(cancelled).toMatchObject({ reason: 'oz0: job cancelled' });
    await expect(handle.result()).rejects.toThrow();
    expect((await handle.describe()).status.name).toBe('CANCELLED');
  });
});

test('C1: a call shorter than node.jobFollowAfterMs is never followed (the node’s own record); one past it is, until the node shuts down', async () => {
  const { config, log } = probeConfig({ node: { jobFollowAfterMs: 3000, shutdownGraceSeconds: 1 } });
  const node = await createNode({ config, logger });
  const long = await node.runUntil(async () => {
    const short = await startJob(config, {
      tenant: 'acme',
      steps: Array.from({ length: 5 }, () => ({ call: 'probe.probe' })),
    });
    await short.result();
    expect(node.follows.record).toMatchObject({ started: 0, following: 0 });
    // The positive control: a call past the threshold.
    const long = await startJob(config, hang('acme'));
    await started(log, long.workflowId);
    await eventually(() => (node.follows.record.following === 1 ? true : undefined), 10_000, 'one follow');
    expect(node.follows.record.started).toBe(1);
    return long;
  });
  // A node shutting down stops its follows (its call was cancelled as the node went: the job's, not a follow's).
  await eventually(() => (node.follows.record.following === 0 ? true : undefined), 5000, 'the follow stopped');
  expect(node.follows.record).toMatchObject({ started: 1, stopped: 0 });
  await long.terminate();
});

test('C1: a follow that fails costs nothing but the early stop: a run Temporal does not know, and one that ended, are dropped without a retry or a stop; past node.jobFollows a run is not followed; one follow per run, going on from its token after its calls ended; a cancel read stops all its calls', async () => {
  const follows = new JobFollows(temporal.client, { max: 1, afterMs: 0 }, logger);
  try {
    const stops: string[] = [];
    const unknown = follows.register(uniqueId('nobody'), randomUUID(), () => stops.push('unknown'));
    await eventually(() => (follows.record.failed === 1 ? true : undefined), 10_000, 'the unknown run dropped');
    unknown();
    // A run that ended: its close event ends the follow; nothing is stopped.
    const { config } = probeConfig();
    const node = await createNode({ config, logger });
    await node.runUntil(async () => {
      const done = await startJob(config, { tenant: 'acme', steps: [{ call: 'probe.probe' }] });
      await done.result();
      const ended = follows.register(done.workflowId, done.firstExecutionRunId, () => stops.push('ended'));
      await eventually(() => (follows.record.started === 2 && follows.record.following === 0 ? true : undefined));
      ended();
      // One running job followed fills the room (max 1): a second is not followed; the first's cancel stops its call.
      const a = await startJob(config, hang('acme'));
      const b = await startJob(config, hang('acme'));
      const unA = follows.register(a.workflowId, a.firstExecutionRunId, () => stops.push('a'));
      await eventually(() => (follows.record.following === 1 ? true : undefined));
      // A second call of the same run shares its follow.
      const unA2 = follows.register(a.workflowId, a.firstExecutionRunId, () => stops.push('a2'));
      await new Promise((r) => setTimeout(r, 200));
      expect(follows.record).toMatchObject({ started: 3, following: 1, full: 0 });
      const unB = follows.register(b.workflowId, b.firstExecutionRunId, () => stops.push('b'));
      await eventually(() => (follows.record.full === 1 ? true : undefined));
      // The run's calls all end, then another starts: its follow goes on from where the last one read to, not event 1.
      unA();
      unA2();
      await eventually(() => (follows.record.following === 0 ? true : undefined));
      const read = follows.record.events;
      expect(read).toBeGreaterThan(0);
      const unA3 = follows.register(a.workflowId, a.firstExecutionRunId, () => stops.push('a3'));
      const unA4 = follows.register(a.workflowId, a.firstExecutionRunId, () => stops.push('a4'));
      await eventually(() => (follows.record.following === 1 ? true : undefined));
      await new Promise((r) => setTimeout(r, 500));
      expect(follows.record.events).toBe(read);
      await a.cancel();
      await eventually(() => (stops.length === 2 ? true : undefined), 10_000, "a's stops");
      await a.result().catch(() => undefined);
      await b.cancel();
      await b.result().catch(() => undefined);
      unA3();
      unA4();
      unB();
    });
    expect(stops).toEqual(['a3', 'a4']);
    expect(follows.record).toMatchObject({ started: 4, failed: 1, full: 1, stopped: 2 });
  } finally {
    follows.close();
  }
});
