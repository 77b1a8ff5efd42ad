/**
 * Scripted sessions (SPEC K3-K6, T4): a session's calls, fixed in the spec, run in order on one node, through that
 * node's own task queue, while a lease activity there heartbeats. When the node is lost (the lease's heartbeat
 * stops), a fresh session of the same number starts on another node and makes the same calls again under the same
 * keys — if every call the lost session made may be made again; otherwise the job stops, naming the call.
 */
import {
  ActivityCancellationType,
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  isCancellation,
  proxyActivities,
  TimeoutFailure,
} from '@temporalio/workflow';
import { TimeoutType } from '@temporalio/common';
import type { Activities } from '../model/activities';
import type { CallStep } from '../model/schemas';
import { forgetLostNode, makeCall, placeCall } from './calls';
import type { JobContext } from './calls';
import { changed } from './marks';
import { FailureType } from '../model/activities';
import type { StepTrace } from '../model/job';
import { SessionKeys, defaultKey } from '../model/keys';
import { splitTool } from '../model/checks';

/** Fresh sessions a session may have after lost nodes before the job gives up. */
export const MAX_SESSION_RUNS = 4;

/**
 * How long a session's node may take to pick up its lease before it is taken as lost (T4): a node that died after
 * it was chosen (its `describeTools` answered) and before it polled its own queue never starts the lease, so no
 * heartbeat could ever time out. Three heartbeat timeouts, at least 15 s.
 */
export function leasePickupSeconds(ctx: JobContext): number {
  return Math.max(15, 3 * ctx.settings.heartbeatTimeoutSeconds);
}

/** N5: where a session's lease (or harness) runs on its node: its session queue, or an older node's own queue. */
export function sessionQueueOf(node: { queue: string; sessionQueue?: string }): string {
  return node.sessionQueue ?? node.queue;
}

/** The lease that pins a session to its node: it heartbeats until cancelled (T4). */
export function sessionLease(ctx: JobContext, queue: string) {
  return proxyActivities<Activities>({
    taskQueue: queue,
    priority: ctx.priority,
    scheduleToStartTimeout: `${leasePickupSeconds(ctx)}s`,
    startToCloseTimeout: '365d',
    heartbeatTimeout: `${ctx.settings.heartbeatTimeoutSeconds}s`,
    retry: { maximumAttempts: 1 },
    // The lease holds nothing: no need to wait for it to acknowledge a cancel.
    cancellationType: ActivityCancellationType.TRY_CANCEL,
  }).holdSession;
}

/** Describes tools on a node: the shared queue (any node: where a session lands) or a session's own. */
export function describeOn(ctx: JobContext, queue?: string) {
  return proxyActivities<Activities>({
    priority: ctx.priority,
    startToCloseTimeout: '60s',
    retry: { maximumAttempts: 3 },
    ...(queue ? { taskQueue: queue, scheduleToStartTimeout: '30s' } : {}),
  }).describeTools;
}

/** T4: the job stops when a lost session made a call that may not be made again, naming it and its key. */
export function mayHaveRun(session: string, why: string, call: { tool: string; key?: string }): ApplicationFailure {
  return ApplicationFailure.nonRetryable(
    `session ${session}: ${why}; ${call.tool} (key ${call.key ?? 'not yet decided'}) may have run and may not be made again`,
    FailureType.mayHaveRun,
  );
}

/**
 * Issue 56.4: the session's node shut down and handed it on, once the calls it ran had ended (its lease, or its
 * harness, failed so): a fresh session goes on where it left, and makes none of its finished calls again.
 */
export function handedOn(err: unknown): boolean {
  return (
    err instanceof ActivityFailure &&
    err.cause instanceof ApplicationFailure &&
    err.cause.type === FailureType.nodeShutdown
  );
}

/** How the trace says a node handed its session on (issue 56.4), where a lost node says why it was taken for lost. */
export function shutDownWords(node: string): string {
  return `node ${node} shut down (its calls had ended; the session was handed on)`;
}

/**
 * The patch (Temporal's versioning) under which a session handed on by its node's shutdown goes on where it left:
 * a history recorded before it made the finished calls again, and its replay must issue the same commands.
 */
export const SESSIONS_HANDED_ON = 'sessions-handed-on';

function notPickedUp(err: unknown): boolean {
  return (
    err instanceof ActivityFailure &&
    err.cause instanceof TimeoutFailure &&
    err.cause.timeoutType === TimeoutType.SCHEDULE_TO_START
  );
}

export async function runScriptedSession(
  ctx: JobContext,
  calls: CallStep[],
  n: number,
  record: (step: StepTrace) => void,
): Promise<void> {
  const session = `s${n}`;
  const tools = [...new Set(calls.map((c) => c.call))];
  // Keys are decided on the session's first run and kept: a fresh session makes the same calls under them (K4).
  const keys: (string | undefined)[] = [];
  // Issue 56.4: the calls that ended in a run its node handed on at shutdown: not made again.
  const finished = new Set<number>();
  let sessionKeys: SessionKeys | undefined;
  /** Runs lost (not handed on): MAX_SESSION_RUNS bounds them; a deploy's hand-overs are not counted. */
  let lostRuns = 0;
  for (let sessionRun = 1; ; sessionRun++) {
    const plan = await describeOn(ctx)(ctx.jobId, ctx.tenant, tools, true);
    // The session's sandboxed servers live on its node; they stop when the job ends.
    ctx.sandboxQueues.add(plan.node.queue);
    sessionKeys ??= new SessionKeys(ctx.jobId, ctx.run, n);
    let lost: string | undefined;
    let handed = false;
    const scope = new CancellationScope();
    const lease = new CancellationScope();
    const leased = lease
      .run(() => sessionLease(ctx, sessionQueueOf(plan.node))())
      .catch((err) => {
        if (isCancellation(err)) return;
        handed = handedOn(err) && changed(ctx.settings, SESSIONS_HANDED_ON);
        lost = handed
          ? shutDownWords(plan.node.id)
          : `node ${plan.node.id} was lost (${
              notPickedUp(err)
                ? `it did not pick up the session within ${leasePickupSeconds(ctx)} s`
                : 'its heartbeat stopped'
            })`;
        scope.cancel();
      });
    const made: number[] = [];
    const ended: number[] = [];
    let lostCall: string | undefined;
    try {
      await scope.run(async () => {
        for (const [i, call] of calls.entries()) {
          if (finished.has(i)) continue;
          // K3 for functions that say idempotentHint; K5: every other call keeps its K2 key.
          keys[i] ??= plan.idempotent[call.call] ? sessionKeys!.next(splitTool(call.call).fn, call.args) : undefined;
          made.push(i);
          const placed = placeCall(ctx);
          const key = (keys[i] ??= defaultKey(ctx.jobId, ctx.run, placed.activityId));
          const end = await makeCall(ctx, placed, call, key, {
            session,
            sessionRun,
            taskQueue: plan.node.queue,
            lost: () => lost,
            record,
          });
          // A call that ended while it waited for a person sent nothing: it counts as not made (T4).
          if (end.unsent) made.pop();
          if (end.lost) {
            lostCall = end.lost;
            return;
          }
          ended.push(i);
        }
      });
    } catch (err) {
      if (!lost) {
        lease.cancel();
        await leased;
        throw err;
      }
    }
    lease.cancel();
    await leased;
    const why = lost ?? (lostCall ? `node ${plan.node.id} was lost (${lostCall})` : undefined);
    if (!why) return;
    forgetLostNode(ctx, plan.node.queue);
    // Issue 56.4: its node handed it on once its calls had ended: those are not made again.
    if (handed) for (const i of ended) finished.add(i);
    else lostRuns++;
    if (finished.size === calls.length) return;
    // T4: a fresh session only if every call the run made (and did not finish, when handed on) may be made again.
    const risky = made.find((i) => !finished.has(i) && !plan.mayRetry[calls[i].call]);
    if (risky !== undefined) throw mayHaveRun(session, why, { tool: calls[risky].call, key: keys[risky] });
    if (lostRuns >= MAX_SESSION_RUNS) {
      throw ApplicationFailure.nonRetryable(
        `session ${session}: ${why}, ${lostRuns} times; giving up`,
        FailureType.mayHaveRun,
      );
    }
  }
}
