/**
 * A live session's Updates from any Temporal client (H4, H5, H9): the node's gateway and the typed helper for a
 * harness outside the job both send them through here. Temporal admits at most a few Updates in flight per workflow
 * (10 by default, `history.maxInFlightUpdates`): calls wait their turn here, and an Update the server refused for that
 * limit is sent again — it was refused before it was accepted, so nothing of it ran.
 */
import { WorkflowUpdateFailedError } from '@temporalio/client';
import type { Client } from '@temporalio/client';
import { status as grpcStatus } from '@grpc/grpc-js';
import { callToolUpdate, cancelCallUpdate } from '../model/messages';
import type { SessionCallInput, SessionCallOutput } from '../model/messages';

/** Calls of one job in flight at once from one process; the rest wait. Leaves room for cancels under Temporal's 10. */
export const CALLS_IN_FLIGHT_PER_JOB = 8;
/** How long an Update refused for Temporal's in-flight limit is offered again before its caller hears why. */
const ADMISSION_PATIENCE_MS = 120_000;

/** An Update the workflow refused (its validator), or that failed: the message says why, in the workflow's words. */
export class SessionUpdateError extends Error {
  override name = 'SessionUpdateError';
}

/** Where a session's Updates go. */
export interface SessionTarget {
  client: Client;
  jobId: string;
  session: string;
  run: number;
}

export function sessionCall(target: SessionTarget) {
  const handle = target.client.workflow.getHandle(target.jobId);
  const where = { session: target.session, run: target.run };
  return {
    /** H4: one call; resolves with its result once the workflow has made it. */
    call(input: Omit<SessionCallInput, 'session' | 'run'>): Promise<SessionCallOutput> {
      return offered(() => handle.executeUpdate(callToolUpdate, { args: [{ ...where, ...input }] }));
    },
    /** H5: stops a running call; false when it had ended. */
    cancel(callId: string, reason?: string): Promise<boolean> {
      return offered(() =>
        handle.executeUpdate(cancelCallUpdate, { args: [{ ...where, callId, ...(reason ? { reason } : {}) }] }),
      );
    },
  };
}

/** Sends an Update, again while Temporal refuses it for its in-flight limit; a refusal by the workflow says why. */
export async function offered<T>(send: () => Promise<T>): Promise<T> {
  const deadline = Date.now() + ADMISSION_PATIENCE_MS;
  for (let wait = 20; ; wait = Math.min(wait * 2, 1000)) {
    try {
      return await send();
    } catch (err) {
      if (isResourceExhausted(err) && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, wait));
        continue;
      }
      if (err instanceof WorkflowUpdateFailedError) {
        throw new SessionUpdateError(err.cause?.message ?? err.message);
      }
      throw err;
    }
  }
}

function isResourceExhausted(err: unknown): boolean {
  for (let e = err as { code?: unknown; cause?: unknown } | undefined; e; e = e.cause as typeof e) {
    if (e.code === grpcStatus.RESOURCE_EXHAUSTED) return true;
  }
  return false;
}

const queues = new Map<string, { running: number; waiting: (() => void)[] }>();

/** Runs `fn` when fewer than {@link CALLS_IN_FLIGHT_PER_JOB} calls of this job are in flight from this process. */
export async function admitted<T>(jobId: string, fn: () => Promise<T>, limit = CALLS_IN_FLIGHT_PER_JOB): Promise<T> {
  let q = queues.get(jobId);
  if (!q) queues.set(jobId, (q = { running: 0, waiting: [] }));
  const queue = q;
  if (queue.running >= limit) await new Promise<void>((resolve) => queue.waiting.push(resolve));
  queue.running++;
  try {
    return await fn();
  } finally {
    queue.running--;
    const next = queue.waiting.shift();
    if (next) next();
    else if (queue.running === 0) queues.delete(jobId);
  }
}
