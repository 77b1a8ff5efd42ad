/**
 * How cancels reach a node (issue 26), found out at its start rather than assumed: Temporal's worker commands push an
 * activity's cancel to the worker process that runs it, where the server turns them on (`frontend.WorkerCommandsEnabled`,
 * which the namespace's capabilities show, and `system.enableCancelActivityWorkerCommand`, which nothing shows). So the
 * node reads the capability, then proves the push with a probe: an activity on its own queue that never heartbeats,
 * cancelled as soon as it runs. Until the probe has heard its cancel, and for good where it does not (Temporal Cloud,
 * an older or unconfigured cluster), cancels are taken from heartbeats' answers, as before.
 */
import { randomBytes } from 'node:crypto';
import type { Client } from '@temporalio/client';
import type { NativeConnection } from '@temporalio/worker';
import type { CancelRoute } from '../activities/heartbeats';
import type { Logger } from '../common/logger';

/** How long the probe's activity waits for its cancel; a pushed one takes milliseconds. */
export const PROBE_WAIT_MS = 3000;
/** The probe goes once more when its first cancel did not come: its activity may have been polled before this
 * process's control queue was (the SDK sets that up beside the workers, not before them). */
const PROBES = 2;

export interface CancelWayOptions {
  connection: NativeConnection;
  client: Client;
  namespace: string;
  /** Where the probe's workflow runs (the jobs' queue: this node's workflow worker, or any other node's). */
  sharedQueue: string;
  /** This node's own queue, where the probe's activity runs. */
  nodeQueue: string;
  route: CancelRoute;
  logger: Logger;
  /** Aborted when the node shuts down: the probe stops waiting, so a node stopped right after its start exits now. */
  signal: AbortSignal;
}

/** Reads the namespace's capabilities: the SDK polls for worker commands only where both are on. */
export async function serverTakesWorkerCommands(connection: NativeConnection, namespace: string): Promise<boolean> {
  const { namespaceInfo } = await connection.workflowService.describeNamespace({ namespace });
  return namespaceInfo?.capabilities?.workerCommands === true && namespaceInfo.capabilities.workerHeartbeats === true;
}

/** Decides the node's cancel way (capability, then probe), sets it on the route, and says it. Never throws. */
export async function findCancelWay(opts: CancelWayOptions): Promise<void> {
  const { route } = opts;
  let why: string;
  let pushedIn: number | undefined;
  try {
    if (!(await serverTakesWorkerCommands(opts.connection, opts.namespace))) {
      why =
        'the server does not take worker commands (its namespace capability workerCommands is off: frontend.WorkerCommandsEnabled)';
    } else {
      for (let n = 1; n <= PROBES && pushedIn === undefined && !opts.signal.aborted; n++) {
        pushedIn = await probe(opts, n);
      }
      why =
        pushedIn !== undefined
          ? `the server pushed a probe's cancel in ${pushedIn} ms`
          : opts.signal.aborted
            ? 'the node stopped before its probe ended'
            : `the server takes worker commands but pushed no cancel within ${PROBE_WAIT_MS / 1000} s (system.enableCancelActivityWorkerCommand off?)`;
    }
  } catch (err) {
    why = `the probe failed: ${(err as Error).message}`;
  }
  route.decide(pushedIn !== undefined ? 'push' : 'heartbeat', why);
  opts.logger.info(
    cancelWayLine(route),
    route.way === 'push' ? 'cancels reach this node by push' : 'cancels reach this node in heartbeat answers',
  );
}

/** What the node says at start about its cancels and its heartbeats. */
export function cancelWayLine(route: CancelRoute): Record<string, unknown> {
  const pace = route.pace(undefined);
  return {
    cancels: route.way,
    why: route.why,
    heartbeats:
      route.way === 'push'
        ? `a running call beats a third of its heartbeat timeout apart, and carries a change within ${pace.carryMs} ms`
        : `a running call beats every ${pace.idleMs} ms`,
  };
}

/** One probe: the cancel's way from the workflow's cancel to the activity, in ms; undefined when it did not come. */
async function probe(opts: CancelWayOptions, n: number): Promise<number | undefined> {
  const { route } = opts;
  let started!: () => void;
  let heard!: () => void;
  const running = new Promise<void>((resolve) => (started = resolve));
  const cancelled = new Promise<void>((resolve) => (heard = resolve));
  route.probe = { started: () => started(), heard: () => heard() };
  try {
    const handle = await opts.client.workflow.start('probeCancelPush', {
      taskQueue: opts.sharedQueue,
      // The platform's (I11), and not foreseeable: nothing can stand under it before the node starts.
      workflowId: `oz0-probe/${opts.nodeQueue}/${n}-${randomBytes(4).toString('hex')}`,
      args: [opts.nodeQueue, PROBE_WAIT_MS],
      workflowExecutionTimeout: '1m',
    });
    if (!(await within(running, 30_000, opts.signal))) return undefined;
    const from = Date.now();
    await handle.cancel();
    const arrived = await within(cancelled, PROBE_WAIT_MS, opts.signal);
    return arrived ? Date.now() - from : undefined;
  } finally {
    route.probe = undefined;
  }
}

/** Whether `p` settles within `ms`; false at once when `signal` is (or gets) aborted. */
function within(p: Promise<void>, ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  let timer: NodeJS.Timeout | undefined;
  let onAbort: (() => void) | undefined;
  return Promise.race([
    p.then(() => true),
    new Promise<boolean>((resolve) => {
      timer = setTimeout(() => resolve(false), ms);
      onAbort = () => resolve(false);
      signal.addEventListener('abort', onAbort, { once: true });
    }),
  ]).finally(() => {
    clearTimeout(timer);
    signal.removeEventListener('abort', onAbort!);
  });
}
