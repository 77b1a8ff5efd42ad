/**
 * A12 (issue 55.5): a person's answer is taken by every job that can still be waiting, whichever release's bundle
 * runs it. A node of the previous release (built from its commit, test/helpers/previous-release.ts) runs a job whose
 * call waits for a person; this release's answer — the inbox's, with the identity the provider vouched for — is taken
 * by it, and its call is made once. The control: the same answer sent as it is to this release's jobs is refused by
 * the older bundle (`an answer has no field "identity"`), and nothing reaches its history.
 */
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { Client } from '@temporalio/client';
import type { WorkflowHandle } from '@temporalio/client';
import { answerCall, listWaitingCalls } from '../../client/calls';
import { answerCallUpdate } from '../../model/messages';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { previousRelease } from '../helpers/previous-release';
import { waitsForPerson } from '../helpers/waiting';
import { fixture, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();
const previous = previousRelease();
const why = 'why' in previous ? previous.why : undefined;
if (why) console.warn(`previous-release.test.ts skipped: ${why}`);
const withPrevious = why ? test.skip : test;

const tenant = uniqueId('acme');
let oldNode: { child: ChildProcess; said: () => string } | undefined;
/** A plain client: the previous release seals nothing and reads nothing sealed. */
let client: Client;
let taskQueue: string;

beforeAll(async () => {
  if (why) return;
  const { dir } = previous as { dir: string };
  const { temporal: where } = temporal.config({});
  taskQueue = uniqueId('previous');
  const state = tmpDir();
  const file = path.join(state, 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      temporal: { address: where.address, namespace: where.namespace, taskQueue },
      servers: { probe: { command: 'node', args: [fixture('probe-server.js')] } },
      tenants: { [tenant]: { policy: { 'probe.*': 'confirm' } } },
      node: { stateDir: path.join(state, 'state') },
    }),
  );
  const child = spawn(path.join(dir, 'bin', 'oz0'), ['worker', '--config', file], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let said = '';
  child.stdout!.on('data', (d: Buffer) => (said += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (said += d.toString()));
  oldNode = { child, said: () => said };
  client = new Client({ connection: temporal.connection, namespace: where.namespace });
}, 180_000);

afterAll(async () => {
  if (!oldNode || oldNode.child.exitCode !== null) return;
  const exited = new Promise((resolve) => oldNode!.child.once('exit', resolve));
  oldNode.child.kill('SIGTERM');
  await exited;
});

async function waitingJob(text: string): Promise<WorkflowHandle> {
  const handle = await client.workflow.start('job', {
    taskQueue,
    workflowId: uniqueId('job-previous'),
    args: [{ tenant, steps: [{ call: 'probe.probe', args: { text } }] }],
  });
  await waitsForPerson(handle).catch((err: Error) => {
    throw new Error(`${err.message}; the previous release's node said: ${oldNode?.said()}`);
  });
  return handle;
}

withPrevious(
  "A12: a job on the previous release's bundle takes this release's answer with a person's identity",
  async () => {
    const identity = { issuer: 'https://id.example', subject: 'ann', email: 'ann@acme.test' };
    const job = await waitingJob('approve me');
    // N3: its bundle keeps no memo of what waits: the list asks the job, and shows it as this release's jobs.
    const { calls, unreachable } = await listWaitingCalls(client, { tenant });
    expect(unreachable).toEqual([]);
    expect(calls).toEqual([expect.objectContaining({ jobId: job.workflowId, tool: 'probe.probe', activityId: 'c1' })]);
    // The control: this release's shape, sent as is, is refused by the older bundle's validator.
    const refused = await client.workflow
      .getHandle(job.workflowId)
      .executeUpdate(answerCallUpdate, { args: [{ approve: true, by: 'ann@acme.test', identity }] })
      .then(
        () => 'taken',
        (err: Error & { cause?: Error }) => err.cause?.message ?? err.message,
      );
    expect(refused).toBe('an answer has no field "identity"');
    // The inbox's answer (client/calls.ts's answerCall, as the inbox sends it) is taken.
    const answered = await answerCall(client, job.workflowId, { approve: true, by: 'ann@acme.test', identity });
    expect(answered).toBeDefined();
    const trace = (await job.result()) as JobTrace;
    const [call] = callsOf(trace);
    expect(call.result.isError).toBe(false);
    expect(call.question?.answer).toMatchObject({
      approved: true,
      by: 'ann@acme.test (vouched for by https://id.example as ann)',
    });
    // A denial in the same shape, with its reason, is taken too.
    const second = await waitingJob('deny me');
    await answerCall(client, second.workflowId, { approve: false, by: 'ann@acme.test', identity, reason: 'not today' });
    const denied = callsOf((await second.result()) as JobTrace)[0];
    expect(denied.result.isError).toBe(true);
    expect(JSON.stringify(denied.result.content)).toContain('not today');
  },
  240_000,
);
