/**
 * Stops that reach the server (C1-C7): a cancel over stdio and Streamable HTTP, the time limit, sandboxed
 * servers stopped with their trees, `cancelling` until every call stopped, attempts that never overlap.
 */
import path from 'node:path';
import { readReceived, serveHttp } from '../../examples/common';
import { createReader } from '../../examples/reader';
import { jobStatus } from '../../client/jobs';
import type { LoadedConfig } from '../../common/config';
import { createNode } from '../../worker/node';
import type { JobTrace } from '../../model/job';
import { approve, eventually, fixture, logger, runJob, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { hostProcesses, sandboxed, sharedFile } from '../helpers/sandbox';
import type { JobSpec } from '../../model/schemas';
import { callsOf } from '../../model/job';
import { traceQuery } from '../../model/messages';

const temporal = useTemporal();

test('C1/C6: a call past its time limit stops: with a 5 s limit the server sees notifications/cancelled at 4.5 s, with a reason naming the time limit', async () => {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
    tools: { 'probe.hang': { timeoutSeconds: 5, maxAttempts: 1 } },
  });
  const { trace } = await runJob(temporal, config, {
    tenant: 'acme',
    // The server is started by the first call, so the timed one's clock starts with its request, not a spawn.
    steps: [{ call: 'probe.probe' }, { call: 'probe.hang', args: { ms: 30_000 } }],
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
  expect(callsOf(trace)[1].attempts).toEqual([
    { attempt: 1, outcome: 'timeout', note: expect.stringContaining('time limit') },
  ]);
  expect(callsOf(trace)[1].result.isError).toBe(true);
});

test('C3: a call stopped on a sandboxed server stops its process tree, SIGKILL after the grace when it ignores SIGTERM', async () => {
  const config = temporal.config({
    servers: {
      box: {
        command: 'node',
        args: [fixture('probe-server.js')],
        sandbox: sandboxed(),
        env: { PROBE_IGNORE_TERM: '1' },
      },
    },
    tools: { 'box.hang': { timeoutSeconds: 4, maxAttempts: 1 } },
  });
  const { trace }: { trace: JobTrace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'box.spawn_child' }, { call: 'box.hang', args: { ms: 30_000 } }, { call: 'box.probe' }],
  });
  const first = callsOf(trace)[0].result.structuredContent as { instance: string; childMarker: string };
  const after = callsOf(trace)[2].result.structuredContent as { instance: string };
  expect(callsOf(trace)[1].attempts[0].outcome).toBe('timeout');
  // The stopped server and its child are gone (seen from the node); the job's next call got a fresh sandboxed server.
  const gone = () => hostProcesses(`oz0-probe ${first.instance}`).length + hostProcesses(first.childMarker).length;
  await eventually(() => (gone() === 0 ? true : undefined), 10_000, 'tree stopped');
  expect(after.instance).not.toBe(first.instance);
});

/**
 * A sandboxed probe (`box`) and a plugin one (`probe`), each with a log of its own: a plugin's files are never in a
 * sandbox's view (I2), even in a folder it may write.
 */
function probeConfig(env: Record<string, string>, tools: Record<string, unknown>, extra: Record<string, unknown> = {}) {
  const { dir, file: boxLog } = sharedFile('box.jsonl');
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: {
      box: {
        command: 'node',
        args: [fixture('probe-server.js')],
        sandbox: sandboxed({ write: [dir] }),
        env: { PROBE_LOG: boxLog, ...env },
      },
      probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } },
    },
    tools,
    ...extra,
  });
  return { config, log, boxLog };
}

function start(config: LoadedConfig, spec: JobSpec, id = uniqueId('stop')) {
  return temporal.client.workflow.start('job', { taskQueue: config.temporal.taskQueue, workflowId: id, args: [spec] });
}

test.each([
  ['2025-11-25', 'notifications/cancelled with the request id and the reason', 'oz0: job cancelled'],
  ['2026-07-28', 'the request’s stream closed, and the handler is cancelled', 'Connection closed'],
] as const)(
  'C2 over Streamable HTTP, MCP %s: a cancelled job sends the remote server %s',
  async (protocol, _how, reason) => {
    const log = path.join(tmpDir(), 'received.jsonl');
    process.env.OZ0_RECEIVED_LOG = log;
    const mcp = await serveHttp(createReader({ stateFile: path.join(tmpDir(), 'seen.json') }), 0);
    try {
      const config = temporal.config({ servers: { search: { url: mcp.url, protocol } } });
      const node = await createNode({ config, logger });
      await node.runUntil(async () => {
        // A tenant of this test's own: its policy workflow lives on this test's task queue.
        const tenant = uniqueId('http');
        await approve(temporal, config, tenant, 'search');
        const handle = await start(config, { tenant, steps: [{ call: 'search.sleep', args: { ms: 60_000 } }] });
        const started = await eventually(() =>
          readReceived(log).find((r) => r.tool === 'sleep' && r.event === 'start'),
        );
        await handle.cancel();
        await expect(handle.result()).rejects.toThrow();
        // On the server's side: the handler that runs the call is cancelled, with the words the protocol carries.
        const cancelled = await eventually(() => readReceived(log).find((r) => r.event === 'cancelled'), 5000);
        expect(cancelled).toMatchObject({ requestId: started.requestId, reason });
        const trace = await handle.query(traceQuery);
        expect(callsOf(trace)[0].protocol).toBe(protocol);
      });
    } finally {
      delete process.env.OZ0_RECEIVED_LOG;
      await mcp.close();
    }
  },
);

test('C3: a cancel never stops a shared plugin server: it keeps answering other jobs', async () => {
  const { config, log } = probeConfig({}, {});
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const victim = await start(config, { tenant: 'acme', steps: [{ call: 'probe.hang', args: { ms: 60_000 } }] });
    const other = await start(config, {
      tenant: 'acme',
      steps: [{ call: 'probe.hang', args: { ms: 2000 } }, { call: 'probe.probe' }],
    });
    await eventually(() => (readReceived(log).filter((r) => r.event === 'start').length === 2 ? true : undefined));
    await victim.cancel();
    await expect(victim.result()).rejects.toThrow();
    const trace: JobTrace = await other.result();
    expect(callsOf(trace).map((s) => s.result.isError)).toEqual([false, false]);
    const pids = new Set(
      readReceived(log)
        .filter((r) => r.event === 'start')
        .map((r) => r.pid),
    );
    expect(pids.size).toBe(1);
    expect((callsOf(trace)[1].result.structuredContent as { pid: number }).pid).toBe([...pids][0]);
    expect(readReceived(log).filter((r) => r.event === 'exit')).toHaveLength(0);
  });
});

test('C4: a job shows cancelling until its sandboxed server (3 s to die) has stopped, then CANCELED, closed after the death', async () => {
  // A kill grace well past the 3 s it takes to die, so a loaded machine does not turn its clean exit into a SIGKILL
  // (which leaves no exit record to time the close against).
  const { config, boxLog: log } = probeConfig({ PROBE_DIE_MS: '3000' }, {}, { node: { killGraceSeconds: 10 } });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await start(config, { tenant: 'acme', steps: [{ call: 'box.hang', args: { ms: 60_000 } }] });
    await eventually(() => readReceived(log).find((r) => r.event === 'start'));
    await handle.cancel();
    const seen = new Set<string>();
    const attribute = new Set<unknown>();
    const done = handle.result().catch(() => undefined);
    let closed = false;
    void done.then(() => (closed = true));
    while (!closed) {
      seen.add(await jobStatus(temporal.client, handle.workflowId));
      const sa = (await handle.describe()).typedSearchAttributes.getAll().find((p) => p.key.name === 'Oz0Status');
      attribute.add(sa?.value);
      await new Promise((r) => setTimeout(r, 200));
    }
    const died = readReceived(log).find((r) => r.event === 'exit')!;
    const term = readReceived(log).find((r) => r.event === 'sigterm')!;
    expect((died.t as number) - (term.t as number)).toBeGreaterThanOrEqual(2900);
    expect(seen.has('cancelling')).toBe(true);
    expect(attribute.has('cancelling')).toBe(true);
    expect(await jobStatus(temporal.client, handle.workflowId)).toBe('CANCELED');
    const closeTime = (await handle.describe()).closeTime!.getTime();
    expect(closeTime).toBeGreaterThan(died.t as number);
  });
});

test('C6: the time limit counts from when the attempt got its slot: a call that waited for one keeps its time', async () => {
  const { config, log } = probeConfig(
    {},
    { 'probe.hang': { timeoutSeconds: 5, maxAttempts: 1 } },
    { node: { slots: 1 } },
  );
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    // The server is started first, as in C1, so neither timed call's clock holds a spawn (a loaded machine's seconds).
    await (await start(config, { tenant: 'acme', steps: [{ call: 'probe.probe' }] })).result();
    const spec: JobSpec = { tenant: 'acme', steps: [{ call: 'probe.hang', args: { ms: 3000 } }] };
    const traces: JobTrace[] = await Promise.all(
      [start(config, spec), start(config, spec)].map(async (h) => (await h).result()),
    );
    const starts = readReceived(log)
      .filter((r) => r.event === 'start')
      .map((r) => r.t as number);
    // The second call waited for the first (one slot), then still had its whole 4.5 s.
    expect(Math.abs(starts[1] - starts[0])).toBeGreaterThan(2500);
    for (const t of traces) expect(callsOf(t)[0].attempts).toEqual([{ attempt: 1, outcome: 'ok' }]);
  });
});

test('C7: a timed-out call is tried again only after its cancel was sent and its sandboxed server stopped', async () => {
  const { config, boxLog: log } = probeConfig(
    { PROBE_DIE_MS: '1000' },
    { 'box.hang_read': { timeoutSeconds: 3, maxAttempts: 2 } },
  );
  const node = await createNode({ config, logger });
  const trace: JobTrace = await node.runUntil(async () =>
    (await start(config, { tenant: 'acme', steps: [{ call: 'box.hang_read', args: { ms: 60_000 } }] })).result(),
  );
  const events = readReceived(log);
  const [first, second] = events.filter((r) => r.event === 'start');
  const cancel = events.find((r) => r.event === 'cancelled' && r.instance === first.instance)!;
  const death = events.find((r) => r.event === 'exit' && r.instance === first.instance)!;
  expect(cancel.reason).toContain('time limit');
  expect(second.instance).not.toBe(first.instance);
  expect(second.t as number).toBeGreaterThan(death.t as number);
  expect(death.t as number).toBeGreaterThanOrEqual(cancel.t as number);
  expect(callsOf(trace)[0].attempts.map((a) => a.outcome)).toEqual(['timeout', 'timeout']);
});
