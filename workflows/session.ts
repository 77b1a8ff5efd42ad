/**
 * Harness sessions (SPEC K3-K6, T4): a session runs its calls in order on one node, through that node's own
 * task queue, while a lease activity there heartbeats. When the node is lost (the lease's heartbeat stops),
 * a fresh session of the same number starts on another node and makes the same calls again under the same
 * keys — if every call the lost session made may be made again; otherwise the job stops, naming the call.
 */
import {
  ActivityCancellationType,
  ApplicationFailure,
  CancellationScope,
  isCancellation,
  proxyActivities,
} from '@temporalio/workflow';
import type { Activities } from '../activities';
import { FailureType } from './definitions';
import { SessionKeys, defaultKey } from './keys';
import { splitTool } from './checks';
import type { CallStep, SessionStep } from '../common/schemas';

/** Fresh sessions a session may have after lost nodes before the job gives up. */
const MAX_SESSION_RUNS = 4;

/** Thrown out of a session's call when its node was lost: the session handles it, never the job. */
export class NodeLost extends Error {
  override name = 'NodeLost';
}

export interface SessionCall {
  session: string;
  sessionRun: number;
  taskQueue: string;
  key: (activityId: string) => string;
  /** Set once the session's node is known lost: the call's cancel then means "lost", not "job cancelled". */
  lost: () => string | undefined;
}

export interface SessionDeps {
  jobId: string;
  tenant: string;
  run: number;
  heartbeatTimeoutSeconds: number;
  sandboxQueues: Set<string>;
  runCall(step: CallStep, opts: SessionCall): Promise<void>;
}

export async function runSession(deps: SessionDeps, step: SessionStep, n: number): Promise<void> {
  const session = `s${n}`;
  const tools = [...new Set(step.session.map((c) => c.call))];
  const { describeTools } = proxyActivities<Activities>({ startToCloseTimeout: '60s', retry: { maximumAttempts: 3 } });
  // Keys are decided on the session's first run and kept: a fresh session makes the same calls under them (K4).
  const keys: (string | undefined)[] = [];
  let sessionKeys: SessionKeys | undefined;
  for (let sessionRun = 1; ; sessionRun++) {
    const plan = await describeTools(deps.jobId, deps.tenant, tools);
    // The session's sandboxed servers live on its node; they stop when the job ends.
    deps.sandboxQueues.add(plan.node.queue);
    sessionKeys ??= new SessionKeys(deps.jobId, deps.run, n);
    const { holdSession } = proxyActivities<Activities>({
      taskQueue: plan.node.queue,
      startToCloseTimeout: '7d',
      heartbeatTimeout: `${deps.heartbeatTimeoutSeconds}s`,
      retry: { maximumAttempts: 1 },
      // The lease holds nothing: no need to wait for it to acknowledge a cancel.
      cancellationType: ActivityCancellationType.TRY_CANCEL,
    });
    let lost: string | undefined;
    const calls = new CancellationScope();
    const lease = new CancellationScope();
    const leased = lease
      .run(() => holdSession())
      .catch((err) => {
        if (isCancellation(err)) return;
        lost = `node ${plan.node.id} was lost (its heartbeat stopped)`;
        calls.cancel();
      });
    const made: number[] = [];
    try {
      await calls.run(async () => {
        for (const [i, call] of step.session.entries()) {
          const { fn } = splitTool(call.call);
          // K3 for functions that say idempotentHint; K5: every other call keeps its K2 key.
          keys[i] ??= plan.idempotent[call.call] ? sessionKeys!.next(fn, call.args) : undefined;
          made.push(i);
          await deps.runCall(call, {
            session,
            sessionRun,
            taskQueue: plan.node.queue,
            key: (activityId) => (keys[i] ??= defaultKey(deps.jobId, deps.run, activityId)),
            lost: () => lost,
          });
        }
      });
      lease.cancel();
      await leased;
      return;
    } catch (err) {
      lease.cancel();
      await leased;
      if (!(err instanceof NodeLost) && !lost) throw err;
      const why = lost ?? (err as Error).message;
      // T4: a fresh session only if every call the lost one made may be made again.
      const risky = made.find((i) => !plan.mayRetry[step.session[i].call]);
      if (risky !== undefined) {
        const call = step.session[risky];
        throw ApplicationFailure.nonRetryable(
          `session ${session}: ${why}; ${call.call} (key ${keys[risky] ?? 'not yet decided'}) may have run and may not be made again`,
          FailureType.mayHaveRun,
        );
      }
      if (sessionRun >= MAX_SESSION_RUNS) {
        throw ApplicationFailure.nonRetryable(
          `session ${session}: ${why}, ${sessionRun} times; giving up`,
          FailureType.mayHaveRun,
        );
      }
    }
  }
}
