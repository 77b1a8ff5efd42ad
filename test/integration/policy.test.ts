/**
 * The tenant's policy (A1-A3), retries that check it first (B6) and kill switches (C5), against a real dev
 * server and real servers, asserting what the servers received.
 */
import path from 'node:path';
import { McpServer } from '@modelcontextprotocol/server';
import type { RegisteredTool } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { Connection } from '@temporalio/client';
import { readReceived, serveHttp } from '../../examples/common';
import type { HttpHandle } from '../../examples/common';
import { changePolicy, policyTargetOf, readPolicy } from '../../common/policy-client';
import type { JobTrace } from '../../model/job';
import { killUpdate, reviveUpdate, setPolicyUpdate } from '../../model/messages';
import { createNode } from '../../worker/node';
import { createLogger } from '../../common/logger';
import type { Oz0Node } from '../../worker/node';
import type { LoadedConfig } from '../../common/config';
import {
  approve,
  eventually,
  fixture,
  logger,
  restartableTemporal,
  testClient,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import type { JobSpec } from '../../model/schemas';
import { callsOf } from '../../model/job';

const temporal = useTemporal();
let remote: HttpHandle;
const remoteCalls: string[] = [];
/** The lookup tool of every session of the remote server: a change applies to all of them. */
const remoteTools: RegisteredTool[] = [];
let notifyListChanged = true;
/** The lookup tool's listing now: new sessions register it so, existing ones are updated. */
const lookup: { description: string; annotations: Record<string, boolean> } = {
  description: 'looks a thing up',
  annotations: { readOnlyHint: true },
};
function changeLookup(change: Partial<typeof lookup>) {
  Object.assign(lookup, change);
  for (const t of remoteTools) t.update(change);
}

beforeAll(async () => {
  // A remote server whose listing the tests change, with or without notifications/tools/list_changed.
  remote = await serveHttp(() => {
    const server = new McpServer({ name: 'remote', version: '1.0.0' });
    const sendToolListChanged = server.sendToolListChanged.bind(server);
    server.sendToolListChanged = () => {
      if (notifyListChanged) sendToolListChanged();
    };
    remoteTools.push(
      server.registerTool(
        'lookup',
        { description: lookup.description, inputSchema: z.object({ q: z.string() }), annotations: lookup.annotations },
        async ({ q }, ctx) => {
          remoteCalls.push(String(ctx.mcpReq._meta?.['oz0/idempotency_key']));
          return { content: [{ type: 'text', text: `found ${q}` }] };
        },
      ),
    );
    return server;
  });
});
afterAll(async () => {
  await remote?.close();
});

function setup(extra: Record<string, unknown> = {}) {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: {
      probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } },
      remote: { url: remote.url },
    },
    tools: { '*': { timeoutSeconds: 30, maxAttempts: 3 } },
    ...extra,
  });
  const target = policyTargetOf(config, temporal.client);
  return { config, log, target };
}

async function withNode<T>(config: LoadedConfig, fn: (node: Oz0Node) => Promise<T>): Promise<T> {
  const node = await createNode({ config, logger });
  return node.runUntil(() => fn(node));
}

function start(config: LoadedConfig, spec: JobSpec, id = uniqueId('job')) {
  return temporal.client.workflow.start('job', { taskQueue: config.temporal.taskQueue, workflowId: id, args: [spec] });
}

const text = (trace: JobTrace, i: number) => (callsOf(trace)[i].result.content[0] as { text: string }).text;

test('A1: deny refuses a call before it reaches the server; the most specific pattern wins; the job goes on', async () => {
  const { config, log, target } = setup();
  const tenant = uniqueId('t');
  await withNode(config, async () => {
    await changePolicy(target, tenant, setPolicyUpdate, ['probe.*', 'deny']);
    await changePolicy(target, tenant, setPolicyUpdate, ['probe.probe', 'allow']);
    const trace: JobTrace = await (
      await start(config, { tenant, steps: [{ call: 'probe.hang', args: { ms: 1 } }, { call: 'probe.probe' }] })
    ).result();
    expect(callsOf(trace)[0].attempts).toEqual([
      { attempt: 1, outcome: 'refused', note: expect.stringContaining('denied') },
    ]);
    expect(text(trace, 0)).toContain('probe.*: deny');
    expect(callsOf(trace)[1].result.isError).toBe(false);
    expect(readReceived(log).filter((r) => r.event === 'start')).toHaveLength(0);
  });
});

test('C5: a policy belongs to the namespace: nodes on another task queue still read it (kill switch, then revive)', async () => {
  const tenant = uniqueId('t');
  const first = setup();
  await withNode(first.config, () => changePolicy(first.target, tenant, killUpdate, ['probe.hang']));
  // The nodes that set it are gone; these ones use a task queue of their own.
  const moved = setup();
  expect(moved.config.temporal.taskQueue).not.toBe(first.config.temporal.taskQueue);
  await withNode(moved.config, async () => {
    const refused: JobTrace = await (
      await start(moved.config, { tenant, steps: [{ call: 'probe.hang', args: { ms: 1 } }] })
    ).result();
    expect(callsOf(refused)[0].attempts).toEqual([
      { attempt: 1, outcome: 'refused', note: expect.stringContaining('the kill switch for probe.hang is on') },
    ]);
    await changePolicy(moved.target, tenant, reviveUpdate, ['probe.hang']);
    const allowed: JobTrace = await (
      await start(moved.config, { tenant, steps: [{ call: 'probe.hang', args: { ms: 1 } }] })
    ).result();
    expect(callsOf(allowed)[0].result.isError).toBe(false);
    expect(readReceived(moved.log).filter((r) => r.event === 'start')).toHaveLength(1);
  });
});

test('A1/A3: the config seeds a tenant policy; `ask` refuses a plugin call until its listing is approved', async () => {
  const tenant = uniqueId('seeded');
  const { config, target } = setup({ tenants: { [tenant]: { policy: { 'probe.*': 'ask' } } } });
  await withNode(config, async () => {
    const refused: JobTrace = await (await start(config, { tenant, steps: [{ call: 'probe.probe' }] })).result();
    expect(callsOf(refused)[0].attempts[0]).toMatchObject({
      outcome: 'refused',
      note: expect.stringContaining('needs approval'),
    });
    await approve(temporal, config, tenant, 'probe');
    const allowed: JobTrace = await (await start(config, { tenant, steps: [{ call: 'probe.probe' }] })).result();
    expect(callsOf(allowed)[0].result.isError).toBe(false);
    // The seed stays the tenant's own: another tenant is not asked.
    const other: JobTrace = await (
      await start(config, { tenant: uniqueId('other'), steps: [{ call: 'probe.probe' }] })
    ).result();
    expect(callsOf(other)[0].result.isError).toBe(false);
    expect((await readPolicy({ ...target, seeds: {} }, tenant)).policy).toEqual({ 'probe.*': 'ask' });
  });
});

test('A2: a remote server needs its listing approved; a changed listing (with or without list_changed) is refused, saying what changed', async () => {
  const { config } = setup();
  const tenant = uniqueId('t');
  const other = uniqueId('t');
  const spec = (t: string): JobSpec => ({ tenant: t, steps: [{ call: 'remote.lookup', args: { q: 'x' } }] });
  await withNode(config, async () => {
    const before = remoteCalls.length;
    const unapproved: JobTrace = await (await start(config, spec(tenant))).result();
    expect(callsOf(unapproved)[0].attempts[0]).toMatchObject({
      outcome: 'refused',
      note: expect.stringContaining('needs approval'),
    });
    await approve(temporal, config, tenant, 'remote');
    const ok = await start(config, spec(tenant));
    await ok.result();
    expect(remoteCalls.slice(before)).toEqual([`${ok.workflowId}/c1`]);
    // One tenant's approval is not another's.
    const otherTrace: JobTrace = await (await start(config, spec(other))).result();
    expect(callsOf(otherTrace)[0].attempts[0].outcome).toBe('refused');

    // A description changed without any notification.
    notifyListChanged = false;
    changeLookup({ description: 'looks a thing up, and keeps a copy' });
    const changed: JobTrace = await (await start(config, spec(tenant))).result();
    expect(callsOf(changed)[0].attempts[0]).toMatchObject({
      outcome: 'refused',
      note: expect.stringContaining('lookup changed'),
    });
    await approve(temporal, config, tenant, 'remote');
    expect(callsOf((await (await start(config, spec(tenant))).result()) as JobTrace)[0].result.isError).toBe(false);

    // A hint changed, with list_changed.
    notifyListChanged = true;
    changeLookup({ annotations: { readOnlyHint: false, destructiveHint: true } });
    const hinted: JobTrace = await (await start(config, spec(tenant))).result();
    expect(callsOf(hinted)[0].attempts[0]).toMatchObject({
      outcome: 'refused',
      note: expect.stringContaining('lookup changed'),
    });
    expect(remoteCalls.length - before).toBe(2);
  });
});

test('B6: a policy changed to deny between attempts stops the call before its next attempt', async () => {
  const { config, log, target } = setup();
  const tenant = uniqueId('t');
  await withNode(config, async () => {
    const handle = await start(config, { tenant, steps: [{ call: 'probe.crash_read' }] });
    await eventually(() => readReceived(log).find((r) => r.event === 'crash_read'), 20_000, 'first attempt');
    // The retry waits Temporal's 1 s initial interval: the change lands inside it.
    await changePolicy(target, tenant, setPolicyUpdate, ['probe.crash_read', 'deny']);
    const trace: JobTrace = await handle.result();
    expect(readReceived(log).filter((r) => r.event === 'crash_read')).toHaveLength(1);
    expect(callsOf(trace)[0].attempts.map((a) => a.outcome)).toEqual(['failed', 'refused']);
    expect(callsOf(trace)[0].attempts[1].note).toContain('denied');
  });
});

test('C1/C5: a kill switch stops running calls (notifications/cancelled names it), refuses new ones until revived; the job goes on', async () => {
  const { config, log, target } = setup();
  const tenant = uniqueId('t');
  const bystander = uniqueId('t');
  await withNode(config, async () => {
    const hang: JobSpec = { tenant, steps: [{ call: 'probe.hang', args: { ms: 60_000 } }, { call: 'probe.probe' }] };
    const jobs = await Promise.all([start(config, hang), start(config, hang)]);
    const other = await start(config, { tenant: bystander, steps: [{ call: 'probe.hang', args: { ms: 1500 } }] });
    await eventually(() => (readReceived(log).filter((r) => r.event === 'start').length === 3 ? true : undefined));
    const killedAt = Date.now();
    await changePolicy(target, tenant, killUpdate, ['probe.hang']);
    const traces: JobTrace[] = await Promise.all(jobs.map((j) => j.result()));
    const cancels = readReceived(log).filter((r) => r.event === 'cancelled');
    expect(cancels).toHaveLength(2);
    for (const c of cancels) {
      expect(c.reason).toBe('oz0: tool killed (kill switch probe.hang)');
      expect((c.t as number) - killedAt).toBeLessThan(2000);
    }
    for (const t of traces) {
      expect(callsOf(t)[0].attempts).toEqual([
        { attempt: 1, outcome: 'killed', note: 'oz0: tool killed (kill switch probe.hang)' },
      ]);
      expect(callsOf(t)[1].result.isError).toBe(false);
    }
    // Another tenant's call of the same tool ran to its end.
    expect(callsOf((await other.result()) as JobTrace)[0].result.isError).toBe(false);
    const refused: JobTrace = await (await start(config, hang)).result();
    expect(callsOf(refused)[0].attempts[0]).toMatchObject({
      outcome: 'refused',
      note: expect.stringContaining('killed'),
    });
    await changePolicy(target, tenant, reviveUpdate, ['probe.hang']);
    const revived: JobTrace = await (
      await start(config, { tenant, steps: [{ call: 'probe.hang', args: { ms: 10 } }] })
    ).result();
    expect(callsOf(revived)[0].attempts).toEqual([{ attempt: 1, outcome: 'ok' }]);
  });
});

test('C5: race-free — calls that start as the switch is thrown are stopped too (many rounds, kill for every tenant)', async () => {
  const { config, log, target } = setup();
  await withNode(config, async () => {
    for (let round = 0; round < 8; round++) {
      const tenant = uniqueId(`race${round}`);
      const spec: JobSpec = { tenant, steps: [{ call: 'probe.hang', args: { ms: 20_000 } }] };
      const early = await Promise.all([0, 1, 2].map(() => start(config, spec)));
      // Throw the switch while more calls are being started.
      const [, late] = await Promise.all([
        new Promise((r) => setTimeout(r, round * 40)).then(() => changePolicy(target, '*', killUpdate, ['probe.hang'])),
        Promise.all([0, 1, 2].map(() => start(config, spec))),
      ]);
      const traces: JobTrace[] = await Promise.all([...early, ...late].map((h) => h.result()));
      // None ran on: each was stopped (killed) or never sent (refused).
      for (const t of traces) expect(['killed', 'refused']).toContain(callsOf(t)[0].attempts.at(-1)!.outcome);
      await changePolicy(target, '*', reviveUpdate, ['probe.hang']);
    }
    const started = readReceived(log).filter((r) => r.event === 'start');
    const cancelled = new Set(
      readReceived(log)
        .filter((r) => r.event === 'cancelled')
        .map((r) => `${r.pid}/${r.requestId}`),
    );
    for (const s of started) expect(cancelled.has(`${s.pid}/${s.requestId}`)).toBe(true);
  });
}, 180_000);

test('A3/C5: kill switches and policy survive a restart of the node and of the Temporal server (its state kept)', async () => {
  const server = await restartableTemporal();
  const { config, log } = setup();
  // A server of its own, to restart: its default namespace.
  config.temporal = { ...config.temporal, address: server.address, namespace: 'default' };
  const tenant = uniqueId('durable');
  const connect = async () => {
    const connection = await Connection.connect({ address: server.address });
    return {
      connection,
      target: policyTargetOf(config, testClient(connection, 'default')),
    };
  };
  let { connection, target } = await connect();
  try {
    await withNode(config, async () => {
      await changePolicy(target, tenant, killUpdate, ['probe.hang']);
      await changePolicy(target, tenant, setPolicyUpdate, ['probe.probe', 'deny']);
    });
    await connection.close();
    await server.restart();
    ({ connection, target } = await connect());
    await withNode(config, async () => {
      expect(await readPolicy(target, tenant)).toMatchObject({
        kills: ['probe.hang'],
        policy: { 'probe.probe': 'deny' },
      });
      const handle = await target.client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId('after-restart'),
        args: [{ tenant, steps: [{ call: 'probe.hang', args: { ms: 10 } }, { call: 'probe.probe' }] }],
      });
      const trace: JobTrace = await handle.result();
      expect(callsOf(trace).map((s) => s.attempts[0].outcome)).toEqual(['refused', 'refused']);
      expect(readReceived(log).filter((r) => r.event === 'start')).toHaveLength(0);
    });
  } finally {
    await connection.close();
    await server.stop();
  }
}, 120_000);

test("A3/C5: a node follows its tenants' policy workflows — first attempts make no read, a kill reaches a running call through the watch, across continue-as-new", async () => {
  const { config, log, target } = setup();
  const tenant = uniqueId('watched');
  // The node's own log at debug: it says each time it reads a policy (a query) and when a watch has caught up.
  const lines: Array<{ msg: string; tenant?: string }> = [];
  const watching = createLogger({
    level: 'debug',
    destination: { write: (line: string) => void lines.push(JSON.parse(line) as { msg: string; tenant?: string }) },
  });
  const reads = () => lines.filter((l) => l.msg === 'policy read').length;
  const caughtUp = (t: string) => lines.some((l) => l.msg === 'policy watch caught up' && l.tenant === t);
  const node = await createNode({ config, logger: watching });
  await node.runUntil(async () => {
    const probes: JobSpec = { tenant, steps: Array.from({ length: 10 }, () => ({ call: 'probe.probe' })) };
    // The first call starts the watches (the tenant's workflow, seeded, and the all-tenants one) and reads.
    await (await start(config, probes)).result();
    await eventually(() => (caughtUp(tenant) && caughtUp('*') ? true : undefined));
    let before = reads();
    const trace: JobTrace = await (await start(config, probes)).result();
    expect(callsOf(trace).every((s) => s.result.isError === false)).toBe(true);
    expect(reads() - before).toBe(0);

    // A kill switch thrown while a call runs stops it, with no read made: the watch brought it.
    const hang = await start(config, { tenant, steps: [{ call: 'probe.hang', args: { ms: 60_000 } }] });
    await eventually(() =>
      readReceived(log).some((r) => r.event === 'start' && r.tool === 'hang') ? true : undefined,
    );
    before = reads();
    await changePolicy(target, tenant, killUpdate, ['probe.hang']);
    const killed: JobTrace = await hang.result();
    expect(callsOf(killed)[0].attempts).toEqual([
      { attempt: 1, outcome: 'killed', note: 'oz0: tool killed (kill switch probe.hang)' },
    ]);
    // The cancel reaches the server's log a moment after the job's result, on a loaded machine.
    await eventually(() => (readReceived(log).some((r) => r.event === 'cancelled') ? true : undefined));
    expect(readReceived(log).filter((r) => r.event === 'cancelled')).toHaveLength(1);
    expect(reads() - before).toBe(0);

    // Past the policy workflow's 500 changes per run: the watch follows it into its next run.
    const firstRun = (await temporal.client.workflow.getHandle(`oz0-policy/${tenant}`).describe()).runId;
    for (let i = 0; i < 500; i++)
      await changePolicy(target, tenant, setPolicyUpdate, ['probe.other', i % 2 ? 'allow' : 'deny']);
    await eventually(async () => {
      const now = await temporal.client.workflow.getHandle(`oz0-policy/${tenant}`).describe();
      return now.runId !== firstRun ? true : undefined;
    });
    await changePolicy(target, tenant, reviveUpdate, ['probe.hang']);
    // The revive came in the new run: a stale copy would refuse, then confirm with a read; the live one just runs.
    before = reads();
    const revived: JobTrace = await (
      await start(config, { tenant, steps: [{ call: 'probe.hang', args: { ms: 10 } }] })
    ).result();
    expect(callsOf(revived)[0].attempts).toEqual([{ attempt: 1, outcome: 'ok' }]);
    expect(reads() - before).toBe(0);
    // A change to deny is seen as it is made; a refusal is confirmed by a read of its own before it is final.
    await changePolicy(target, tenant, setPolicyUpdate, ['probe.probe', 'deny']);
    before = reads();
    const denied: JobTrace = await (await start(config, { tenant, steps: [{ call: 'probe.probe' }] })).result();
    expect(callsOf(denied)[0].attempts).toEqual([
      { attempt: 1, outcome: 'refused', note: expect.stringContaining('deny') },
    ]);
    expect(reads() - before).toBeGreaterThan(0);
  });
}, 180_000);
