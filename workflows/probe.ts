/**
 * The probe a node makes at start to learn how cancels reach it (issue 26): one activity on the node's own queue
 * that never heartbeats, cancelled as soon as it runs. Pushed by the server (worker commands), the cancel reaches it
 * in milliseconds; otherwise not before the activity gives up waiting. Nothing of a job's runs here.
 */
import { ActivityCancellationType, isCancellation, proxyActivities } from '@temporalio/workflow';
import type { Activities } from '../model/activities';

/** Runs the probe's activity on `queue` and ends when it does; the node cancels this workflow to cancel it. */
export async function probeCancelPush(queue: string, waitMs: number): Promise<void> {
  const { awaitPushedCancel } = proxyActivities<Activities>({
    taskQueue: queue,
    scheduleToStartTimeout: '30s',
    startToCloseTimeout: `${waitMs + 30_000}ms`,
    // Long enough that no heartbeat is ever asked of it: a cancel that arrives came by push.
    heartbeatTimeout: `${waitMs + 30_000}ms`,
    retry: { maximumAttempts: 1 },
    // The activity's own answer (pushed or not) is what the node reads: wait for it.
    cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
  });
  try {
    await awaitPushedCancel(waitMs);
  } catch (err) {
    // Cancelled as the node meant it to be: the probe ends completed, no failure in the UI.
    if (!isCancellation(err)) throw err;
  }
}
