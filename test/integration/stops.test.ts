/**
 * Stops that reach the server (issue "Cancels"), the parts already built: the time limit (C6) and a
 * sandboxed server stopped with its whole tree, even when it ignores SIGTERM (C3).
 */
import path from 'node:path';
import { readReceived } from '../../examples/common';
import type { JobTrace } from '../../workflows/definitions';
import { alive, eventually, fixture, runJob, startTemporal, testConfig, tmpDir } from '../helpers/temporal';
import type { TestTemporal } from '../helpers/temporal';

let temporal: TestTemporal;

beforeAll(async () => {
  temporal = await startTemporal();
});
afterAll(async () => {
  await temporal?.close();
});

test('C6: with a 5 s limit the server sees notifications/cancelled at 4.5 s, with a reason naming the time limit', async () => {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = testConfig(temporal.server.address, {
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
    tools: { 'probe.hang': { timeoutSeconds: 5, maxAttempts: 1 } },
  });
  const { trace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'probe.hang', args: { ms: 30_000 } }],
  });
  const received = readReceived(log);
  const start = received.find((r) => r.event === 'start')!;
  const cancel = received.find((r) => r.event === 'cancelled')!;
  expect(cancel.requestId).toBe(start.requestId);
  expect(String(cancel.reason)).toContain('time limit');
  // Measured from the server's own clock; the attempt's clock started a little before the request.
  const elapsed = (cancel.t as number) - (start.t as number);
  expect(elapsed).toBeGreaterThan(4000);
  expect(elapsed).toBeLessThan(4800);
  expect(trace.steps[0].attempts).toEqual([
    { attempt: 1, outcome: 'timeout', note: expect.stringContaining('time limit') },
  ]);
  expect(trace.steps[0].result.isError).toBe(true);
});

test('C3: a call stopped on a sandboxed server stops its process tree, SIGKILL after the grace when it ignores SIGTERM', async () => {
  const config = testConfig(temporal.server.address, {
    servers: {
      box: { command: 'node', args: [fixture('probe-server.js')], sandbox: true, env: { PROBE_IGNORE_TERM: '1' } },
    },
    tools: { 'box.hang': { timeoutSeconds: 4, maxAttempts: 1 } },
  });
  const { trace }: { trace: JobTrace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'box.spawn_child' }, { call: 'box.hang', args: { ms: 30_000 } }, { call: 'box.probe' }],
  });
  const first = trace.steps[0].result.structuredContent as { pid: number; child: number };
  const after = trace.steps[2].result.structuredContent as { pid: number };
  expect(trace.steps[1].attempts[0].outcome).toBe('timeout');
  // The stopped server and its child are gone; the job's next call got a fresh sandboxed server.
  await eventually(() => (!alive(first.pid) && !alive(first.child) ? true : undefined), 10_000, 'tree stopped');
  expect(after.pid).not.toBe(first.pid);
});
