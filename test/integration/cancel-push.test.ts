/**
 * Cancels by push (issue 26, C1/C2): where the server pushes an activity's cancel to its worker (Temporal's worker
 * commands, on in every dev server oz0 starts), a node says so at start and its calls hear a job's cancel without a
 * heartbeat; where it does not, the node says it takes cancels from heartbeats' answers and beats as often as before.
 */
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import { DEV_SERVER_DYNAMIC_CONFIG, startDevServer } from '../../worker/dev-server';
import type { DevServer } from '../../worker/dev-server';
import { findTemporalCli } from '../../worker/temporal-cli';
import type { Client } from '@temporalio/client';
import { Connection } from '@temporalio/client';
import type { LoadedConfig } from '../../common/config';
import {
  eventually,
  externalTemporal,
  fixture,
  logger,
  testClient,
  testConfig,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import type { TemporalAt } from '../helpers/temporal';

const temporal = useTemporal();

function probeConfig(at: string | TemporalAt, log: string, node: Record<string, unknown>): LoadedConfig {
  return testConfig(at, {
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
    tools: { 'probe.hang': { timeoutSeconds: 120, maxAttempts: 1 } },
    node,
  });
}

/** Starts a job of one hanging call, cancels it once the server has it, and returns the server's log of both. */
async function cancelHangingCall(client: Client, node: Oz0Node, config: LoadedConfig, log: string) {
  const handle = await client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('push'),
    args: [{ tenant: 'acme', steps: [{ call: 'probe.hang', args: { ms: 120_000 } }] }],
  });
  const started = await eventually(() => readReceived(log).find((r) => r.event === 'start'));
  const pending = (await handle.describe()).raw.pendingActivities ?? [];
  await handle.cancel();
  const cancelled = await eventually(() => readReceived(log).find((r) => r.event === 'cancelled'), 30_000);
  await expect(handle.result()).rejects.toThrow();
  return { started, cancelled, beatenBeforeCancel: pending.some((a) => a.lastHeartbeatTime) };
}

test('C1/C2 by push: the node says cancels are pushed, and a call that has not heartbeaten once hears its job cancel: the server gets notifications/cancelled', async () => {
  const log = path.join(tmpDir(), 'probe.jsonl');
  // A heartbeat timeout of 90 s: with push the call's first beat would come 30 s after it started.
  const config = probeConfig(temporal.server, log, { heartbeatTimeoutSeconds: 90 });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    if (externalTemporal) return; // a cluster's own config decides; deploy/temporal/dynamicconfig.yaml turns it on
    await node.route.decided;
    expect(node.route.way).toBe('push');
    expect(node.route.why).toMatch(/^the server pushed a probe's cancel in \d+ ms$/);
    expect(node.route.pace(90_000)).toEqual({ idleMs: 30_000, carryMs: 1000 });
    const { started, cancelled, beatenBeforeCancel } = await cancelHangingCall(temporal.client, node, config, log);
    expect(cancelled).toMatchObject({ requestId: started.requestId, reason: 'oz0: job cancelled' });
    // The call had not heartbeaten when it was cancelled, and heard it long before its first beat (30 s).
    expect(beatenBeforeCancel).toBe(false);
    expect((cancelled.t as number) - (started.t as number)).toBeLessThan(15_000);
  });
});

test('C1/C2 without push: on a server without worker commands the node says cancels come in heartbeat answers, beats every heartbeatMs, and a cancel still reaches the server', async () => {
  if (externalTemporal) return;
  // The readers raised as always, worker commands left at the server's default (off): a Temporal Cloud or an older
  // cluster, as a node sees it.
  const dynamicConfig = Object.fromEntries(
    Object.entries(DEV_SERVER_DYNAMIC_CONFIG).filter(([key]) => key.startsWith('history.')),
  );
  const server: DevServer = await startDevServer({
    cli: findTemporalCli({ install: false }),
    uiPort: false,
    dynamicConfig,
  });
  const connection = await Connection.connect({ address: server.address });
  try {
    const client = testClient(connection, 'default');
    const log = path.join(tmpDir(), 'probe.jsonl');
    const config = probeConfig(server.address, log, { heartbeatMs: 200 });
    const node = await createNode({ config, logger });
    await node.runUntil(async () => {
      await node.route.decided;
      expect(node.route.way).toBe('heartbeat');
      expect(node.route.why).toContain('does not take worker commands');
      expect(node.route.pace(10_000)).toEqual({ idleMs: 200, carryMs: 0 });
      const { started, cancelled } = await cancelHangingCall(client, node, config, log);
      expect(cancelled).toMatchObject({ requestId: started.requestId, reason: 'oz0: job cancelled' });
    });
  } finally {
    await connection.close();
    await server.stop();
  }
});
