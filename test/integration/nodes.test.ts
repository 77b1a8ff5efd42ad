/**
 * Several nodes without Docker: real `oz0 worker` processes against one dev server share the work; a node
 * stops gracefully on SIGTERM — it lets a short call finish, cancels a long one past its grace time (the
 * server sees notifications/cancelled), and exits 0.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import type { JobTrace } from '../../model/job';
import { createNode } from '../../worker/node';
import { eventually, fixture, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { callsOf } from '../../model/job';

const temporal = useTemporal();

function setup(node: Record<string, unknown>) {
  const dir = tmpDir();
  const log = path.join(dir, 'probe.jsonl');
  const servers = { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } };
  const config = temporal.config({ servers, node });
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({ temporal: config.temporal, servers, node: { ...node, stateDir: path.join(dir, 'state') } }),
  );
  return { config, file, log };
}

test('T4 (nodes): two oz0 worker processes share one task queue; every job completes and both nodes make calls', async () => {
  const { config, file } = setup({ slots: 1 });
  const [a, b] = await temporal.startWorkers(file, 'node-a', 'node-b');
  const jobs = await Promise.all(
    [1, 2, 3, 4].map((i) =>
      temporal.client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId(`multi-${i}`),
        args: [{ tenant: 'acme', steps: [{ call: 'probe.hang', args: { ms: 700 } }, { call: 'probe.probe' }] }],
      }),
    ),
  );
  const traces: JobTrace[] = await Promise.all(jobs.map((h) => h.result()));
  expect(traces.every((t) => callsOf(t).every((s) => !s.result.isError))).toBe(true);
  const nodes = new Set(traces.flatMap((t) => callsOf(t).map((s) => s.node)));
  expect(nodes).toEqual(new Set(['node-a', 'node-b']));
  a.proc.kill('SIGTERM');
  b.proc.kill('SIGTERM');
  expect(await a.exited).toBe(0);
  expect(await b.exited).toBe(0);
});

test('graceful shutdown: on SIGTERM a node lets a short call finish, cancels a long one after its grace, exits 0', async () => {
  const { config, file, log } = setup({ shutdownGraceSeconds: 3 });
  const w = await temporal.startWorker(file, 'node-graceful');
  const start = (ms: number) =>
    temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId(`graceful-${ms}`),
      args: [{ tenant: 'acme', steps: [{ call: 'probe.hang', args: { ms } }] }],
    });
  const short = await start(1500);
  const long = await start(60_000);
  await eventually(
    () => (readReceived(log).filter((r) => r.event === 'start').length === 2 ? true : undefined),
    20_000,
    'both calls started',
  );
  const signalledAt = Date.now();
  w.proc.kill('SIGTERM');
  expect(await w.exited).toBe(0);
  const stoppedAfter = Date.now() - signalledAt;
  const received = readReceived(log);
  const longStart = received.find((r) => r.event === 'start' && r.key === `${long.workflowId}/c1`)!;
  const cancels = received.filter((r) => r.event === 'cancelled');
  // Only the long call was cancelled, with a reason that says why, once the grace time was up.
  expect(cancels).toHaveLength(1);
  expect(cancels[0]).toMatchObject({ requestId: longStart.requestId, reason: 'oz0: node shutting down' });
  expect((cancels[0].t as number) - signalledAt).toBeGreaterThanOrEqual(2500);
  expect(stoppedAfter).toBeLessThan(20_000);
  // Another node finishes both jobs: the short call had completed; the long one was cut off mid-call.
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const s: JobTrace = await short.result();
    expect(callsOf(s)[0].result.isError).toBe(false);
    expect(callsOf(s)[0].node).toBe('node-graceful');
    const l: JobTrace = await long.result();
    expect(callsOf(l)[0].result.isError).toBe(true);
    expect(callsOf(l)[0].attempts[0]).toMatchObject({ attempt: 1, outcome: 'lost', note: 'oz0: node shutting down' });
  });
});
