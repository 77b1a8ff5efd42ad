/**
 * What stops an attempt's request, and how the attempt hears it (C1-C6, H5): its job cancelled or its node shutting
 * down (Temporal's cancellation, read from its details), its job's cancel read in the job's own history before that
 * (./job-follows.ts), a kill switch (the tenant's policy), a live session's caller, and the attempt's own time limit.
 * The first cause wins; settle reads it. A stop read in the job's history still waits for Temporal's own cancel.
 */
import { ApplicationFailure } from '@temporalio/activity';
import type { Context } from '@temporalio/activity';
import type { ActivityCancellationDetails } from '@temporalio/common';
import type { CallProgressState, Outcome } from '../../model/schemas';
import { FailureType } from '../../model/activities';
import type { CallInput } from '../../model/activities';
import type { PolicyGate } from '../policy/gate';
import type { JobFollows } from './job-follows';
import type { CallRelay } from './relay';
import { attemptLimitMs } from './verdicts';

/** Why an attempt's request was stopped, in the trace's words; the first cause wins. */
export interface StopCause {
  outcome: Outcome;
  text: string;
  /** A live session's caller stopped this call (H5): it ends here, and the job goes on. */
  bySession?: true;
  /**
   * C1: the job's cancel was read in its history (./job-follows.ts) before Temporal cancelled the activity: the
   * request is stopped now, and the attempt ends as cancelled once Temporal's own cancel has come.
   */
  beforeTemporal?: true;
}

/** The words of a job's cancel, whichever way the node heard it (the server reads them as the cancel's reason). */
const JOB_CANCELLED = 'oz0: job cancelled';

/** Why Temporal asked the activity to stop, from its cancellation details (never from message text). */
export function cancelCause(details: ActivityCancellationDetails | undefined): StopCause {
  if (details?.cancelRequested) return { outcome: 'cancelled', text: JOB_CANCELLED };
  if (details?.workerShutdown) return { outcome: 'lost', text: 'oz0: node shutting down' };
  if (details?.timedOut) return { outcome: 'timeout', text: "oz0: Temporal's timeout for the attempt passed" };
  if (details?.paused) return { outcome: 'failed', text: 'oz0: the call was paused in Temporal' };
  if (details?.reset) return { outcome: 'failed', text: 'oz0: the call was reset in Temporal' };
  if (details?.notFound) return { outcome: 'cancelled', text: 'oz0: Temporal no longer knows this attempt' };
  return { outcome: 'cancelled', text: 'oz0: stopped by Temporal' };
}

/**
 * Hears the attempt's stops from now on, each handed to `stop`; returns the function that stops hearing them. The
 * attempt calls it before the policy is read (C5), so a kill switch thrown from then on stops its call too.
 */
export function hearStops(
  ears: {
    gate: PolicyGate;
    relay: CallRelay;
    follows: JobFollows;
    ctx: Pick<Context, 'cancellationSignal' | 'cancellationDetails' | 'info'>;
  },
  input: Pick<CallInput, 'tenant' | 'tool' | 'jobId' | 'relay'>,
  stop: (why: StopCause) => void,
): () => void {
  const { gate, relay, follows, ctx } = ears;
  const unregister = gate.register({
    tenant: input.tenant,
    tool: input.tool,
    stop: (why) => stop({ outcome: 'killed', text: why }),
  });
  // C1: the run that scheduled this activity, whose history says when its job is cancelled (a local activity runs
  // within its job's workflow task, which holds that event back: it hears Temporal's way only).
  const job = ctx.info.isLocal ? undefined : ctx.info.workflowExecution;
  const unfollow = job
    ? follows.register(job.workflowId, job.runId, () =>
        stop({ outcome: 'cancelled', text: JOB_CANCELLED, beforeTemporal: true }),
      )
    : undefined;
  const onCancel = () => stop(cancelCause(ctx.cancellationDetails));
  if (ctx.cancellationSignal.aborted) onCancel();
  else ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
  const unrelay = input.relay
    ? relay.register(input.jobId, input.relay.callId, (why) =>
        stop({ outcome: 'cancelled', text: `oz0: cancelled by its session: ${why}`, bySession: true }),
      )
    : undefined;
  return () => {
    ctx.cancellationSignal.removeEventListener('abort', onCancel);
    unrelay?.();
    unfollow?.();
    unregister();
  };
}

/**
 * C6: the attempt's own time limit, counted from when it got its slot on the node (`startedAt`), is a stop when it
 * passes. Returns the time left now, and the function that stops hearing it (send calls it once the request ended).
 */
export function hearTimeLimit(
  timeoutSeconds: number,
  startedAt: number,
  stop: (why: StopCause) => void,
): { remainingMs: number; unhear: () => void } {
  const remainingMs = attemptLimitMs(timeoutSeconds) - (Date.now() - startedAt);
  const limit = setTimeout(
    () => stop({ outcome: 'timeout', text: `oz0: time limit: ${timeoutSeconds} s less its margin` }),
    Math.max(0, remainingMs),
  );
  return { remainingMs, unhear: () => clearTimeout(limit) };
}

/** How long an attempt stopped for its job's cancel waits for Temporal's cancel of its activity. */
const TEMPORAL_CANCEL_WAIT_MS = 60_000;

/**
 * C1: the job's cancel was read in its history before Temporal cancelled this activity (./job-follows.ts): its
 * request is already stopped, its sandbox too; the activity ends as cancelled only once Temporal's own cancel has
 * come, so that Temporal settles it exactly as before (ending it sooner would be a failure, and a failure may be
 * retried). It heartbeats meanwhile, so that cancel reaches it whichever way the node hears cancels.
 */
export async function temporalCancel(ctx: Context, tool: string, state: CallProgressState): Promise<void> {
  const signal = ctx.cancellationSignal;
  const came = await new Promise<boolean>((resolve) => {
    if (signal.aborted) return resolve(true);
    const late = setTimeout(() => resolve(false), TEMPORAL_CANCEL_WAIT_MS);
    signal.addEventListener('abort', () => (clearTimeout(late), resolve(true)), { once: true });
  });
  if (came) return;
  // The job's cancel was requested, yet its workflow never cancelled this call: it ends here, never made again.
  throw ApplicationFailure.create({
    type: FailureType.callCancelled,
    message: `${tool}: oz0: job cancelled, and its workflow did not cancel the call within a minute`,
    nonRetryable: true,
    details: [state],
  });
}
