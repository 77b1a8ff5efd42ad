/**
 * Busy services (B1-B6): a busy answer is tried again after the server's wait, under the same key, only for
 * a call that may be made again; anything else hands the job the server's error with the wait in words. A
 * remote server's HTTP 429 on the call's own POST is such a busy answer. Counted on the servers' side.
 */
import path from 'node:path';
import { readReceived, serveHttp } from '../../examples/common';
import type { HttpHandle } from '../../examples/common';
import { createReader } from '../../examples/reader';
import { startBusyProxy } from '../../examples/busy-proxy';
import type { BusyProxy } from '../../examples/busy-proxy';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import type { JobTrace } from '../../model/job';
import { setPolicyUpdate } from '../../model/messages';
import type { LoadedConfig } from '../../common/config';
import { createNode } from '../../worker/node';
import { approve, eventually, fixture, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import type { JobSpec } from '../../model/schemas';
import { callsOf } from '../../model/job';

const temporal = useTemporal();

function setup(tools: Record<string, unknown> = {}, servers: Record<string, unknown> = {}) {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } }, ...servers },
    tools: { '*': { timeoutSeconds: 30, maxAttempts: 3 }, ...tools },
  });
  return { config, log };
}

async function run(config: LoadedConfig, spec: JobSpec, before?: () => Promise<unknown>): Promise<JobTrace> {
  const node = await createNode({ config, logger });
  return node.runUntil(async () => {
    await before?.();
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('busy'),
      args: [spec],
    });
    return handle.result();
  });
}

const calls = (log: string, tool: string) =>
  readReceived(log).filter((r) => r.event === 'busy-call' && r.tool === tool);
const texts = (trace: JobTrace, i = 0) =>
  callsOf(trace)
    [i].result.content.map((c) => (c as { text: string }).text)
    .join(' | ');

test('B2: a busy read is tried again after the server’s wait (±0.5 s), under the same key', async () => {
  const { config, log } = setup();
  const trace = await run(config, {
    tenant: 'acme',
    steps: [{ call: 'probe.busy_read', args: { times: 2, retry_after: 2 } }],
  });
  const seen = calls(log, 'busy_read');
  expect(seen).toHaveLength(3);
  expect(new Set(seen.map((c) => c.key)).size).toBe(1);
  for (const i of [1, 2]) {
    const gap = ((seen[i].t as number) - (seen[i - 1].t as number)) / 1000;
    expect(gap).toBeGreaterThan(1.5);
    expect(gap).toBeLessThan(2.5);
  }
  expect(callsOf(trace)[0].result.isError).toBe(false);
  expect(callsOf(trace)[0].attempts.map((a) => a.outcome)).toEqual(['busy', 'busy', 'ok']);
  expect(callsOf(trace)[0].attempts[0].note).toContain('wait of 2 seconds');
});

test('B2: without oz0/retry_after the retry policy’s backoff applies', async () => {
  const { config, log } = setup();
  await run(config, { tenant: 'acme', steps: [{ call: 'probe.busy_read', args: { times: 1 } }] });
  const seen = calls(log, 'busy_read');
  expect(seen).toHaveLength(2);
  // Temporal's initial interval is 1 s.
  expect((seen[1].t as number) - (seen[0].t as number)).toBeGreaterThan(800);
});

test('B2/B3: the exact number of attempts for each class of function; the last busy answer reaches the job in words', async () => {
  const { config, log } = setup();
  const always = { times: 100, retry_after: 0.2 };
  const trace = await run(config, {
    tenant: 'acme',
    steps: ['busy_read', 'busy_idem', 'busy_idem_nokey', 'busy_write'].map((fn) => ({
      call: `probe.${fn}`,
      args: always,
    })),
  });
  expect(calls(log, 'busy_read')).toHaveLength(3);
  expect(calls(log, 'busy_idem')).toHaveLength(3);
  expect(calls(log, 'busy_idem_nokey')).toHaveLength(1);
  expect(calls(log, 'busy_write')).toHaveLength(1);
  expect(callsOf(trace).every((s) => s.result.isError)).toBe(true);
  expect(texts(trace, 0)).toContain('The billing API is busy');
  expect(texts(trace, 0)).toContain('that was the last attempt');
  expect(texts(trace, 3)).toContain('this call gets one attempt');
  expect(callsOf(trace)[3].attempts).toEqual([
    { attempt: 1, outcome: 'busy', note: expect.stringContaining('one attempt') },
  ]);
});

test('B3: a wait over 60 s is not waited for: the job reads the error and the wait in words', async () => {
  const { config, log } = setup();
  const trace = await run(config, {
    tenant: 'acme',
    steps: [{ call: 'probe.busy_read', args: { times: 5, retry_after: 90 } }],
  });
  expect(calls(log, 'busy_read')).toHaveLength(1);
  expect(texts(trace)).toContain('asked to wait 90 seconds');
  expect(texts(trace)).toContain('over oz0’s limit of 60 seconds');
});

test('B6: a policy changed to deny during a busy wait stops the next attempt', async () => {
  const { config, log } = setup();
  const tenant = uniqueId('t');
  const node = await createNode({ config, logger });
  const trace: JobTrace = await node.runUntil(async () => {
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('b6'),
      args: [{ tenant, steps: [{ call: 'probe.busy_read', args: { times: 5, retry_after: 3 } }] }],
    });
    await eventually(() => calls(log, 'busy_read')[0]);
    const target = policyTargetOf(config, temporal.client);
    await changePolicy(target, tenant, setPolicyUpdate, ['probe.busy_read', 'deny']);
    return handle.result();
  });
  expect(calls(log, 'busy_read')).toHaveLength(1);
  expect(callsOf(trace)[0].attempts.map((a) => a.outcome)).toEqual(['busy', 'refused']);
});

describe('B4: HTTP 429 from a remote server', () => {
  let mcp: HttpHandle;
  let proxy: BusyProxy;
  let url: string;
  const received = path.join(tmpDir(), 'received.jsonl');
  /**
   * What the proxy answers 429 to next: how many tools/call POSTs, how many of the connection's own (initialize, or
   * server/discover on 2026-07-28), and with what.
   */
  const plan = { calls: 0, connect: 0, retryAfter: () => '1' };

  beforeAll(async () => {
    process.env.OZ0_RECEIVED_LOG = received;
    mcp = await serveHttp(createReader({ stateFile: path.join(tmpDir(), 'seen.json') }), 0);
    proxy = await startBusyProxy(mcp.url, (method) => {
      const limit =
        (method === 'tools/call' && plan.calls > 0 && plan.calls--) ||
        ((method === 'initialize' || method === 'server/discover') && plan.connect > 0 && plan.connect--);
      // Made when the 429 is answered: a date made earlier could be past by then on a loaded machine.
      return limit ? plan.retryAfter() : undefined;
    });
    url = proxy.url;
  });
  afterAll(async () => {
    delete process.env.OZ0_RECEIVED_LOG;
    await proxy?.close();
    await mcp?.close();
  });

  const echoes = () => readReceived(received).filter((r) => r.tool === 'echo');

  test.each<[string, '2025-11-25' | '2026-07-28', () => string]>([
    ['seconds', '2025-11-25', () => '1'],
    ['an HTTP date', '2025-11-25', () => new Date(Date.now() + 2000).toUTCString()],
    ['seconds', '2026-07-28', () => '1'],
  ])(
    'a 429 on the call’s own POST (Retry-After as %s, MCP %s) is busy: nothing was made, the read is tried again',
    async (_what, protocol, header) => {
      const { config } = setup({}, { search: { url, protocol } });
      const tenant = uniqueId('t');
      plan.calls = 1;
      plan.retryAfter = header;
      const before = echoes().length;
      const trace = await run(config, { tenant, steps: [{ call: 'search.echo', args: { text: 'x' } }] }, () =>
        approve(temporal, config, tenant, 'search'),
      );
      // The trace first: when it is wrong, it says what happened instead.
      expect(callsOf(trace)[0].attempts).toEqual([
        { attempt: 1, outcome: 'busy', note: expect.stringContaining('tried again') },
        expect.objectContaining({ attempt: 2, outcome: 'ok' }),
      ]);
      expect(callsOf(trace)[0].result.isError).toBe(false);
      expect(echoes().length - before).toBe(1);
    },
  );

  test.each([
    ['initialize', '2025-11-25'],
    ['server/discover', 'auto'],
  ] as const)(
    'a 429 on the connection’s own %s (MCP %s) says nothing about the call: outcome unknown, not retried',
    async (_request, protocol) => {
      const { config } = setup({}, { search: { url, protocol } });
      const tenant = uniqueId('t');
      const before = echoes().length;
      const trace = await run(config, { tenant, steps: [{ call: 'search.echo', args: { text: 'y' } }] }, async () => {
        await approve(temporal, config, tenant, 'search');
        plan.connect = 1;
      });
      expect(echoes().length - before).toBe(0);
      expect(callsOf(trace)[0].attempts).toEqual([
        { attempt: 1, outcome: 'failed', note: expect.stringContaining('outcome unknown') },
      ]);
    },
  );
});
