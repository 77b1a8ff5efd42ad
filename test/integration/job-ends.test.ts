/**
 * I9 (issue 34.6): every end of a job stops its sandboxes within 30 s. A job that completes or is cancelled stops them
 * itself; one terminated from Temporal or past its time limit runs no more code, so the node finds out (it describes
 * the jobs of what it holds every node.sandboxCheckSeconds) and stops them. Each end is tried with a real job whose
 * sandboxed server started and then waits between steps (an external session: nothing runs on the server), asserting
 * on the node's side that the sandbox's processes are gone, beside the control that they were there until then; and a
 * job that continues as new keeps its sandbox (the same process) until its last run ends.
 */
import type { WorkflowHandle } from '@temporalio/client';
import type { LoadedConfig } from '../../common/config';
import { sandboxFolderName, sessionFolderName } from '../../activities/sandbox/folders';
import { createNode } from '../../worker/node';
import type { JobSpec } from '../../model/schemas';
import type { JobTrace } from '../../model/job';
import { eventually, fixture, logger, uniqueId, useTemporal } from '../helpers/temporal';
import { hostProcessesIn, probeHarness, sandboxed } from '../helpers/sandbox';

const temporal = useTemporal();

/** I9's bound. */
const BOUND_MS = 30_000;

function config(over: Record<string, unknown> = {}): LoadedConfig {
  return temporal.config({
    servers: { box: { command: 'node', args: [fixture('hostile.js'), 'server'], sandbox: sandboxed() } },
    harnesses: { probe: probeHarness(['box.*']) },
    // The node asks after its sandboxes' jobs every 2 s rather than 10: a job that ends without a word is found sooner,
    // by the same sweep, well within I9's bound.
    node: { sandboxCheckSeconds: 2 },
    ...over,
  });
}

/** The pids on the node of a job's sandbox (its bwrap's command line names the sandbox's folder). */
function sandboxOf(jobId: string): number[] {
  return hostProcessesIn(sandboxFolderName({ tenant: 'acme', jobId }, 'box')).map((p) => p.pid);
}

/** Starts a job of tenant acme on the config's queue, with a fresh id. */
async function startJob(cfg: LoadedConfig, steps: JobSpec['steps'], timeout?: string) {
  const jobId = uniqueId('ends');
  const handle = await temporal.client.workflow.start('job', {
    taskQueue: cfg.temporal.taskQueue,
    workflowId: jobId,
    args: [{ tenant: 'acme', steps } satisfies JobSpec],
    ...(timeout ? { workflowExecutionTimeout: timeout } : {}),
  });
  return { jobId, handle };
}

/** Waits until `n` steps of the job are in its trace. */
async function stepsDone(handle: WorkflowHandle, n: number): Promise<void> {
  await eventually(
    async () => ((await handle.query<JobTrace>('trace')).steps.length >= n ? true : undefined),
    60_000,
    `${n} steps of ${handle.workflowId}`,
  );
}

/** How long after `t0` the sandbox's processes were all gone (fails past the bound). */
async function goneAfter(jobId: string, t0: number): Promise<number> {
  await eventually(
    () => (sandboxOf(jobId).length === 0 ? true : undefined),
    BOUND_MS + 5_000,
    `${jobId}'s sandbox gone`,
  );
  return Date.now() - t0;
}

const waiting: JobSpec['steps'] = [{ call: 'box.folder', args: {} }, { session: { external: true } }];

test.each<[string, { spec?: JobSpec['steps']; timeout?: string; end: (h: WorkflowHandle) => Promise<unknown> }]>([
  ['completed', { spec: [{ call: 'box.folder', args: {} }], end: (h) => h.result() }],
  ['cancelled', { end: (h) => h.cancel() }],
  ['terminated from Temporal', { end: (h) => h.terminate('I9: a hostile operator') }],
  ['timed out (its workflow execution timeout)', { timeout: '12s', end: (h) => h.result().catch(() => undefined) }],
])('I9: a job %s has its sandboxed server stopped within 30 s; it ran until then (the control)', async (_end, how) => {
  const cfg = config();
  const node = await createNode({ config: cfg, logger });
  const elapsed = await node.runUntil(async () => {
    const { jobId, handle } = await startJob(cfg, how.spec ?? waiting, how.timeout);
    if (!how.spec) {
      await stepsDone(handle, 1);
      expect(sandboxOf(jobId).length).toBeGreaterThan(0);
    }
    const t0 = Date.now();
    await how.end(handle);
    return goneAfter(jobId, t0);
  });
  expect(elapsed).toBeLessThan(BOUND_MS);
});

test('I9: a job that continues as new keeps its sandbox (the same process) into its next run, and when that run is terminated the sandbox is stopped within 30 s', async () => {
  const cfg = config({ jobs: { continueAsNewAfterCalls: 1 } });
  const node = await createNode({ config: cfg, logger });
  const { before, after, elapsed } = await node.runUntil(async () => {
    const { jobId, handle } = await startJob(cfg, [{ call: 'box.folder', args: {} }, ...waiting]);
    await stepsDone(handle, 1);
    const before = sandboxOf(jobId);
    // The next run (continued as new after one call) made its call on the same sandbox and now waits.
    const latest = temporal.client.workflow.getHandle(jobId);
    await eventually(async () => ((await latest.query<JobTrace>('trace')).run >= 1 ? true : undefined), 60_000);
    await stepsDone(latest, 2);
    const after = sandboxOf(jobId);
    const t0 = Date.now();
    await latest.terminate('I9: the last run ends');
    return { before, after, elapsed: await goneAfter(jobId, t0) };
  });
  expect(before.length).toBeGreaterThan(0);
  expect(after).toEqual(before);
  expect(elapsed).toBeLessThan(BOUND_MS);
});

test('I9: a terminated job’s harness is stopped within 30 s; it ran until then (the control)', async () => {
  const cfg = config();
  const node = await createNode({ config: cfg, logger });
  const elapsed = await node.runUntil(async () => {
    const { jobId, handle } = await startJob(cfg, [
      { session: { harness: 'probe', input: { steps: [{ sleep: 600_000 }] } } },
    ]);
    // Its bwrap's command line names the session's folder.
    const harness = () => hostProcessesIn(sessionFolderName({ tenant: 'acme', jobId }, 's1', 1));
    await eventually(() => (harness().length > 0 ? true : undefined), 60_000, 'the harness running');
    const t0 = Date.now();
    await handle.terminate('I9: a hostile operator');
    await eventually(() => (harness().length === 0 ? true : undefined), BOUND_MS + 5_000, 'the harness gone');
    return Date.now() - t0;
  });
  expect(elapsed).toBeLessThan(BOUND_MS);
});
