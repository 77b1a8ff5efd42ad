/**
 * Issue 56.3: what Worker Versioning does at a deploy, read from the histories (which worker, of which build,
 * completed each workflow task and started each activity), on bare workers of the bench:
 * - a PINNED job started on build a, build b made current, a's worker replaced by another of build a: where its rest
 *   runs, and whether it waits while no worker of a polls;
 * - a rolling upgrade from unversioned workers (oz0 today): an unversioned worker's jobs and new jobs, once a
 *   versioned worker polls the same queue, and once its build is made current.
 */
import { status as grpcStatus } from '@grpc/grpc-js';
import type { temporal } from '@temporalio/proto';
import type { Row } from '../common';
import { startBareWorker } from '../env';
import type { BenchEnv } from '../env';
import type { BareWorker } from '../bare/worker';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Makes `buildId` its deployment's current version. The server refuses a version none of whose workers has polled
 * yet (NotFound), or whose queues are not all polled (FailedPrecondition): a worker's first poll is not awaited by
 * Worker.run, so those are tried again, for 30 s at most. Returns how long it took.
 */
export async function makeCurrent(env: BenchEnv, deploymentName: string, buildId: string): Promise<number> {
  const t = performance.now();
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      await env.client.workflowService.setWorkerDeploymentCurrentVersion({
        namespace: env.server.namespace,
        deploymentName,
        buildId,
        identity: 'oz0-bench',
      });
      return performance.now() - t;
    } catch (err) {
      const code = (err as { code?: number }).code;
      const retried = code === grpcStatus.NOT_FOUND || code === grpcStatus.FAILED_PRECONDITION;
      if (!retried || Date.now() > deadline) throw err;
      await sleep(100);
    }
  }
}

/** Who ran a job's tasks, in order, repeats folded: `unversioned → build-b[b]` (identity, and [build] if versioned). */
export function runners(events: HistoryEvent[]): string {
  const seen: { identity: string; label: string }[] = [];
  for (const e of events) {
    const wft = e.workflowTaskCompletedEventAttributes;
    const identity = wft?.identity ?? e.activityTaskStartedEventAttributes?.identity;
    if (!identity) continue;
    const build = wft?.deploymentVersion?.buildId;
    const label = `${identity}${build ? `[${build}]` : ''}`;
    const last = seen.at(-1);
    if (last?.identity !== identity) seen.push({ identity, label });
    else if (build) last.label = label;
  }
  return seen.map((s) => s.label).join(' → ');
}

export async function checkDeploys(env: BenchEnv): Promise<{ rows: Row[]; data: Record<string, unknown> }> {
  const data: Record<string, unknown> = {};
  const workers: BareWorker[] = [];
  const start = async (taskQueue: string, identity: string, deployment?: { name: string; buildId: string }) => {
    const w = await startBareWorker(env, taskQueue, 10, { identity, ...(deployment ? { deployment } : {}) });
    workers.push(w);
    return w;
  };
  const stop = async (w: BareWorker) => {
    workers.splice(workers.indexOf(w), 1);
    await w.close();
  };
  const job = (taskQueue: string) =>
    env.client.workflow.start('bareWaitJob', { taskQueue, workflowId: env.id('deploy'), args: [] });
  const events = async (id: string) => (await env.client.workflow.getHandle(id).fetchHistory()).events ?? [];
  /** Until a job's first call has completed (it then waits for its signal). */
  const firstCallDone = async (id: string) => {
    const deadline = Date.now() + 30_000;
    while (!(await events(id)).some((e) => e.activityTaskCompletedEventAttributes)) {
      if (Date.now() > deadline) throw new Error(`bench: ${id}'s first call never completed`);
      await sleep(50);
    }
  };
  const tasksSince = async (id: string, n: number) =>
    (await events(id)).filter((e) => e.workflowTaskCompletedEventAttributes).length - n;
  const rows: Row[] = [];
  try {
    // A PINNED job across a deploy.
    const pinQueue = env.id('vq-pin');
    const pinDeployment = env.id('oz0-pin');
    const buildA = await start(pinQueue, 'build-a', { name: pinDeployment, buildId: 'a' });
    const toCurrent = await makeCurrent(env, pinDeployment, 'a');
    const pinned = await job(pinQueue);
    await firstCallDone(pinned.workflowId);
    await start(pinQueue, 'build-b', { name: pinDeployment, buildId: 'b' });
    await makeCurrent(env, pinDeployment, 'b');
    const fresh = await job(pinQueue);
    // Build a's only worker goes: does the pinned job wait for a, or move to b?
    await stop(buildA);
    const before = await tasksSince(pinned.workflowId, 0);
    await pinned.signal('bareGo');
    await fresh.signal('bareGo');
    await sleep(3000);
    const whileNoA = await tasksSince(pinned.workflowId, before);
    await start(pinQueue, 'build-a-2', { name: pinDeployment, buildId: 'a' });
    await Promise.all([pinned.result(), fresh.result()]);
    const pinnedRan = runners(await events(pinned.workflowId));
    const freshRan = runners(await events(fresh.workflowId));
    const described = (await pinned.describe()).raw.workflowExecutionInfo?.versioningInfo;
    data.pinned = { toCurrentMs: toCurrent, pinnedRan, freshRan, whileNoA, described };
    rows.push(
      {
        measure: 'Versioning: a PINNED job, build b made current while it waits',
        figure:
          `ran ${pinnedRan}; signalled with no worker of a: ${whileNoA} task${whileNoA === 1 ? '' : 's'} in 3 s ` +
          `(b idle beside it); a new job ran ${freshRan}`,
      },
      {
        measure: 'Versioning: a new version made current, after its first poll',
        figure: `${Math.round(toCurrent)} ms (set-current-version tried until the server knew the version)`,
      },
    );
    for (const w of [...workers]) await stop(w);

    // A rolling upgrade from unversioned workers (oz0 today).
    const rollQueue = env.id('vq-roll');
    const rollDeployment = env.id('oz0-roll');
    await start(rollQueue, 'unversioned');
    const old = await job(rollQueue);
    await firstCallDone(old.workflowId);
    await start(rollQueue, 'build-v1', { name: rollDeployment, buildId: 'v1' });
    // The versioned worker polls, its version not current: where new jobs go.
    await sleep(1000);
    const polled = await job(rollQueue);
    await firstCallDone(polled.workflowId);
    await makeCurrent(env, rollDeployment, 'v1');
    const after = await job(rollQueue);
    await Promise.all([old, polled, after].map((h) => h.signal('bareGo')));
    await Promise.all([old, polled, after].map((h) => h.result()));
    const ran = {
      old: runners(await events(old.workflowId)),
      polled: runners(await events(polled.workflowId)),
      after: runners(await events(after.workflowId)),
    };
    data.rolling = { ran, described: (await old.describe()).raw.workflowExecutionInfo?.versioningInfo };
    rows.push({
      measure: 'Versioning: from unversioned workers, a versioned one polling the queue',
      figure:
        `job started before it ran ${ran.old}; started while v1 polled (not current) ran ${ran.polled}; ` +
        `started once v1 was current ran ${ran.after}`,
    });
  } finally {
    for (const w of workers) await w.close();
  }
  return { rows, data };
}
