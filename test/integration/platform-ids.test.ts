/**
 * I11: the platform's own workflow ids are never a job's. A tenant's policy is the workflow `oz0-policy/<tenant>`, its
 * limiter `oz0-shares/<tenant>`, a node's probes `oz0-probe/…`; a job under one of them would stand where a node reads
 * the tenant's rules — started as a policy's input (`{ tenant }`), it would read as an empty policy that allows every
 * call. Asserted on the server's side: what the probe server ran, by job.
 */
import fs from 'node:fs';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { createNode } from '../../worker/node';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import { killUpdate } from '../../model/messages';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { startJob } from '../../client/jobs';
import { oz0 } from '../helpers/cli';
import { fixture, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

/** A tenant whose config denies `probe.hang` and allows everything else. */
function setup(tenant: string) {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
    tools: { '*': { timeoutSeconds: 30, maxAttempts: 1 } },
    tenants: { [tenant]: { policy: { 'probe.hang': 'deny' } } },
  });
  return { config, log };
}

/** The tenant's two calls: the one its policy denies, then one it allows. */
function twoCalls(tenant: string): JobSpec {
  return {
    tenant,
    steps: [
      { call: 'probe.hang', args: { ms: 10 } },
      { call: 'probe.hang_read', args: { ms: 10 } },
    ],
  };
}

/** The tools the probe server started for a job. */
function ranFor(log: string, jobId: string): string[] {
  return readReceived(log)
    .filter((e) => e.event === 'start' && String(e.key).startsWith(`${jobId}/`))
    .map((e) => String(e.tool));
}

async function runJob(taskQueue: string, spec: JobSpec, prefix: string) {
  const workflowId = uniqueId(prefix);
  const handle = await temporal.client.workflow.start('job', { taskQueue, workflowId, args: [spec] });
  return { workflowId, trace: (await handle.result()) as JobTrace };
}

test("I11: a job under a tenant's policy id is refused by oz0's client and the CLI, naming it; one started by a plain client ends at once, and the tenant's calls stay held to its own policy (the control: its allowed call runs)", async () => {
  const tenant = uniqueId('sq');
  const { config, log } = setup(tenant);
  const taskQueue = config.temporal.taskQueue;
  const squatId = `oz0-policy/${tenant}`;
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    // oz0's own client refuses the id before anything starts, naming it.
    const jc = { client: temporal.client, taskQueue, harnesses: [], policy: policyTargetOf(config, temporal.client) };
    await expect(startJob(jc, twoCalls(tenant), { workflowId: squatId })).rejects.toThrow(
      `bad job id: ${squatId} is the platform's`,
    );
    // A plain Temporal client does not check: the job, with a policy's input shape too, ends at its first task.
    const squat = await temporal.client.workflow.start('job', {
      taskQueue,
      workflowId: squatId,
      args: [{ ...twoCalls(tenant), seed: {} }],
    });
    const failed = await squat.result().catch((err: unknown) => err);
    expect(failed).toBeInstanceOf(WorkflowFailedError);
    expect(String((failed as WorkflowFailedError).cause?.message)).toContain(
      `bad job id: ${squatId} is the platform's`,
    );
    // The tenant's next job: its denied call is refused (nothing sent), its allowed call runs.
    const { workflowId, trace } = await runJob(taskQueue, twoCalls(tenant), 'after-squat');
    const [denied, allowed] = callsOf(trace);
    expect(denied.result.isError).toBe(true);
    expect(allowed.result.isError).toBeFalsy();
    expect(ranFor(log, workflowId)).toEqual(['hang_read']);
    // Its policy workflow is a policy again, and a kill switch reaches it.
    const described = await temporal.client.workflow.getHandle(squatId).describe();
    expect(described.type).toBe('tenantPolicy');
    const state = await changePolicy(policyTargetOf(config, temporal.client), tenant, killUpdate, ['probe.*']);
    expect(state.kills).toContain('probe.*');
  });
}, 90_000);

test('I11: the CLI refuses a job id of the platform’s, naming it; an id merely like one starts', async () => {
  const tenant = uniqueId('cli');
  const { config } = setup(tenant);
  const dir = tmpDir();
  const spec = path.join(dir, 'job.json');
  fs.writeFileSync(spec, JSON.stringify(twoCalls(tenant)));
  const configFile = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(configFile, JSON.stringify({ temporal: config.temporal, tenants: { [tenant]: {} } }));
  for (const id of [`oz0-policy/${tenant}`, `oz0-shares/${tenant}`, 'oz0-probe/x/1', 'OZ0-Policy/x']) {
    const refused = await oz0(['job', 'start', spec, '--id', id, '--config', configFile]);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain(`${id} is the platform's`);
  }
  // The control: ids that only look alike are a tenant's own.
  const like = uniqueId('oz0-policy-like');
  const ok = await oz0(['job', 'start', spec, '--id', like, '--config', configFile]);
  expect(ok.stderr).toBe('');
  expect(ok.code).toBe(0);
  await temporal.client.workflow.getHandle(like).terminate('test: no node runs it');
}, 60_000);

test("I11: a workflow of another type standing under a tenant's policy id is never read as its policy: the tenant's calls are refused, nothing sent, until it ends; then its own policy holds", async () => {
  const tenant = uniqueId('sq');
  const { config, log } = setup(tenant);
  const taskQueue = config.temporal.taskQueue;
  const squatId = `oz0-policy/${tenant}`;
  // Started with a policy's input, `{ tenant }` and no seed: read as a policy, it would allow every call. Of a type
  // the node runs (a tenant's limiter, on the policy queue), so it stays running and answers what it knows.
  const squat = await temporal.client.workflow.start('tenantShares', {
    taskQueue: config.temporal.policyTaskQueue,
    workflowId: squatId,
    args: [{ tenant }],
  });
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const during = await runJob(taskQueue, twoCalls(tenant), 'during-squat');
    // Both calls fail before they are sent: the node cannot read the tenant's policy from that workflow.
    for (const step of callsOf(during.trace)) {
      expect(step.result.isError).toBe(true);
      expect(JSON.stringify(step.result.content)).toContain(
        `${squatId} is a tenantShares workflow, not a tenant's policy`,
      );
    }
    expect(ranFor(log, during.workflowId)).toEqual([]);
    // The control: once it ends, the node reads the tenant's policy: the denied call is refused, the allowed one runs.
    await squat.terminate('test: the squat ends');
    const after = await runJob(taskQueue, twoCalls(tenant), 'after-squat');
    expect(callsOf(after.trace).map((s) => Boolean(s.result.isError))).toEqual([true, false]);
    expect(ranFor(log, after.workflowId)).toEqual(['hang_read']);
  });
}, 120_000);
