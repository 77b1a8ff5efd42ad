/**
 * Issue 56.4, a deploy is no loss (T4, H8, H9): a node told to shut down while a scripted session, a harness session
 * and an external session run on it lets their running calls finish within its grace, then ends each session's lease
 * as a shutdown — at once, not after a heartbeat timeout — and the trace says the node shut down. The next node
 * goes on with each session where it was: the calls that had finished are not made again (the probe server's own
 * log holds each key once). The control: a node killed with SIGKILL is still taken for lost when its heartbeat stops,
 * and its session's finished calls are made again under their keys.
 */
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { openSession } from '../../client/sessions';
import { callsOf, isSessionTrace } from '../../model/job';
import type { JobTrace, SessionTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { FailureType } from '../../model/activities';
import { timestampMs } from '../../common/time';
import { createNode } from '../../worker/node';
import {
  ROOT,
  configFile,
  eventually,
  fixture,
  killTree,
  logger,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import type { WorkflowHandle } from '@temporalio/client';

const temporal = useTemporal();

function setup(node: Record<string, unknown>) {
  const dir = tmpDir();
  const log = path.join(dir, 'probe.jsonl');
  const servers = { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } };
  const harnesses = {
    steps: {
      command: 'node',
      args: [fixture('harness.js')],
      env: { NODE_PATH: path.join(ROOT, 'node_modules') },
      tools: ['probe.*'],
      timeoutSeconds: 120,
      sandbox: { read: [path.join(ROOT, 'node_modules')] },
    },
  };
  const config = temporal.config({ servers, harnesses, node });
  const file = configFile(dir, config, { servers, harnesses, node });
  return { config, file, log };
}

/** hang_read is read-only: T4 lets a lost session make it again, so only the hand-over keeps it from being made twice. */
const hang = (ms: number) => ({ call: 'probe.hang_read', args: { ms } });

/** The keys the probe server started a call under, for one job, in order (one per request it received). */
function startedKeys(log: string, jobId: string): string[] {
  return readReceived(log)
    .filter((r) => r.event === 'start' && String(r.key).startsWith(`${jobId}/`))
    .map((r) => r.key as string);
}

/** When the session's lease (or harness) ended, and how: from the job's history. */
async function leaseEnd(handle: WorkflowHandle) {
  const events = (await handle.fetchHistory()).events ?? [];
  const scheduled = new Set(
    events
      .filter((e) =>
        ['holdSession', 'runHarness'].includes(e.activityTaskScheduledEventAttributes?.activityType?.name ?? ''),
      )
      .map((e) => String(e.eventId)),
  );
  const failed = events.find((e) => scheduled.has(String(e.activityTaskFailedEventAttributes?.scheduledEventId ?? '')));
  const timedOut = events.find((e) =>
    scheduled.has(String(e.activityTaskTimedOutEventAttributes?.scheduledEventId ?? '')),
  );
  return {
    failedAt: failed ? timestampMs(failed.eventTime) : undefined,
    failedType: failed?.activityTaskFailedEventAttributes?.failure?.applicationFailureInfo?.type,
    timedOut: timedOut !== undefined,
  };
}

function sessionOf(trace: JobTrace): SessionTrace {
  return trace.steps.find(isSessionTrace)!;
}

test('issue 56.4 (T4, H8, H9): a node shut down hands its scripted, harness and external sessions on as a shutdown, at once; no finished call is made again', async () => {
  // A heartbeat timeout far longer than the hand-over may take: a lease that only timed out could not pass.
  const { config, log } = setup({ heartbeatTimeoutSeconds: 60, shutdownGraceSeconds: 15 });
  const a = await createNode({ config, logger, name: 'deploy-a' });
  const runningA = a.run();
  const start = (id: string, steps: JobSpec['steps']) =>
    temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId(id),
      args: [{ tenant: 'acme', steps } satisfies JobSpec],
    });
  const scripted = await start('handover-scripted', [{ session: [hang(100), hang(4000), hang(100)] }]);
  const harness = await start('handover-harness', [
    { session: { harness: 'steps', input: { steps: [hang(100), hang(4000), hang(100)] } } },
  ]);
  const external = await start('handover-external', [{ session: { external: true } }]);
  const client = await openSession(temporal.client, external.workflowId);
  expect(client.node).toBe('deploy-a');
  expect((await client.callTool('probe.hang_read', { ms: 100 })).isError).toBe(false);
  const longExternal = client.callTool('probe.hang_read', { ms: 4000 });
  // Every session's long call has started on node A: then A is told to stop.
  await eventually(
    () => ([scripted, harness, external].every((h) => startedKeys(log, h.workflowId).length === 2) ? true : undefined),
    60_000,
    'each session’s second call started',
  );
  const shutdownAt = Date.now();
  await a.shutdown();
  await runningA;
  // The same release started again (another node): each session goes on where it was.
  const b = await createNode({ config, logger, name: 'deploy-b' });
  await b.runUntil(async () => {
    // The running call finished within the grace: the external client has its answer (its Update completes once a
    // node runs the job's workflow again).
    expect((await longExternal).isError).toBe(false);
    const again = await eventually(
      () => openSession(temporal.client, external.workflowId).catch(() => undefined),
      60_000,
      'the external session to open again',
    );
    expect([again.run, again.node]).toEqual([2, 'deploy-b']);
    // The client makes its calls again from the start: the two that had finished are answered, not made again.
    const first = await again.callTool('probe.hang_read', { ms: 100 });
    const second = await again.callTool('probe.hang_read', { ms: 4000 });
    const third = await again.callTool('probe.hang_read', { ms: 100 });
    expect([first, second, third].every((r) => !r.isError)).toBe(true);
    await again.close('done');
    const traces: JobTrace[] = await Promise.all([scripted, harness, external].map((h) => h.result()));

    for (const [handle, trace] of [scripted, harness, external].map((h, i) => [h, traces[i]] as const)) {
      // Server side: each of the session's three calls reached the probe server once, under a key of its own.
      const keys = startedKeys(log, handle.workflowId);
      expect(keys).toHaveLength(3);
      expect(new Set(keys).size).toBe(3);
      // The lease ended as a shutdown (not a heartbeat timeout), within the grace of the shutdown.
      const lease = await leaseEnd(handle);
      expect(lease.timedOut).toBe(false);
      expect(lease.failedType).toBe(FailureType.nodeShutdown);
      expect(lease.failedAt! - shutdownAt).toBeLessThan(15_000);
      expect(JSON.stringify(trace)).toContain('node deploy-a shut down');
      expect(JSON.stringify(trace)).not.toContain('heartbeat stopped');
    }
    // The scripted session: two calls ended on A, the third was made on B.
    const steps = callsOf(traces[0]).filter((s) => !s.result.isError);
    expect(steps.map((s) => [s.sessionRun ?? 1, s.node])).toEqual([
      [1, 'deploy-a'],
      [1, 'deploy-a'],
      [2, 'deploy-b'],
    ]);
    // The harness and the external session: run 1 handed on by A, run 2 on B, which ended the session.
    for (const trace of traces.slice(1)) {
      const session = sessionOf(trace);
      expect(session.runs.map((r) => [r.run, r.node])).toEqual([
        [1, 'deploy-a'],
        [2, 'deploy-b'],
      ]);
      expect(session.runs[0].ended).toMatch(/^handed on: node deploy-a shut down/);
      expect(session.result?.isError).toBe(false);
    }
    // The harness's run 2 heard the finished calls' answers under their keys, and made only the third.
    const seen = sessionOf(traces[1]).result!.structuredContent as { sessionRun: string; calls: { key: string }[] };
    expect(seen.sessionRun).toBe('2');
    expect(seen.calls.map((c) => c.key)).toEqual(startedKeys(log, harness.workflowId));
    expect([first.key, second.key, third.key]).toEqual(startedKeys(log, external.workflowId));
  });
}, 240_000);

test('issue 56.4, the control (T4): a node killed with SIGKILL is taken for lost when its heartbeat stops, and its session’s finished calls are made again', async () => {
  const { config, file, log } = setup({ heartbeatTimeoutSeconds: 4 });
  const a = await temporal.startWorker(file, 'killed-a');
  const handle = await temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('handover-killed'),
    args: [{ tenant: 'acme', steps: [{ session: [hang(100), hang(4000), hang(100)] }] } satisfies JobSpec],
  });
  await eventually(
    () => (startedKeys(log, handle.workflowId).length === 2 ? true : undefined),
    60_000,
    'the second call started',
  );
  killTree(a.proc.pid!);
  await a.exited;
  const b = await createNode({ config, logger, name: 'killed-b' });
  const trace: JobTrace = await b.runUntil(() => handle.result());
  const lease = await leaseEnd(handle);
  expect(lease.timedOut).toBe(true);
  expect(JSON.stringify(trace)).toContain('node killed-a was lost (its heartbeat stopped)');
  // T4: the fresh session made the calls again from the start, under the same keys: the first one twice.
  const keys = startedKeys(log, handle.workflowId);
  expect(keys.length).toBeGreaterThan(3);
  expect(keys.filter((k) => k === keys[0])).toHaveLength(2);
}, 180_000);
