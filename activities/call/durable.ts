/**
 * H4 (issue 26.3): a live session's call answers its caller as soon as its result is durable, not after the workflow
 * task that completes its Update. Temporal needs two workflow tasks for an Update that waits on an activity (accept
 * it and schedule the activity; record the result and complete the Update); the second is taken off the caller's
 * path: the attempt's activity completes itself (async completion, with the same result the worker would send),
 * and once Temporal has accepted that completion the node's gateway hears the answer (./relay.ts).
 *
 * Only an answer the workflow hands on unchanged goes this way: an attempt that returned a result (not one that
 * asks a person first, nor a failure, which Temporal may retry). The Update still completes, with the same result;
 * a node lost between the two has answered once, and the job's next workflow task (on another node) records it.
 */
import { CompleteAsyncError, Context } from '@temporalio/activity';
import { ActivityNotFoundError } from '@temporalio/client';
import type { Client } from '@temporalio/client';
import type { Logger } from '../../common/logger';
import type { CallAsks, CallInput, CallOutput, CallWaits } from '../../model/activities';
import type { CallRelay } from './relay';
import { wholeAnswerOf } from './answer';

/** How often the completion is offered again when Temporal could not be reached, before the attempt is left to time out. */
const COMPLETE_TRIES = 5;

/** `OZ0_TEST_FAULT`: the node dies (SIGKILL) right after it answered a live call early; for tests only. */
export const DIE_AFTER_EARLY_ANSWER = 'die-after-early-answer';

/** Completions sent from here and not yet answered: a node closing its connection waits for them. */
const inFlight = new Set<Promise<void>>();

/** Resolves when every completion sent so far has its answer (a node's shutdown, before its connection closes). */
export async function completionsSent(): Promise<void> {
  while (inFlight.size > 0) await Promise.all([...inFlight]);
}

export interface DurableDeps {
  client: Client;
  relay: CallRelay;
  logger: Logger;
}

/** Hands a live session's answer to Temporal from here, then to its caller; anything else as the worker would. */
export function completeDurably(
  deps: DurableDeps,
  input: CallInput,
  out: CallOutput | CallAsks | CallWaits,
): CallOutput | CallAsks | CallWaits {
  const relay = input.relay;
  if (!relay || !('result' in out)) return out;
  const { taskToken } = Context.current().info;
  // After the worker has taken the CompleteAsyncError below: the activity is then ours to complete.
  let settle!: () => void;
  const sent = new Promise<void>((resolve) => (settle = resolve));
  const done = () => {
    inFlight.delete(sent);
    settle();
  };
  inFlight.add(sent);
  setImmediate(() => {
    void complete(deps, taskToken, out).then((accepted) => {
      done();
      if (!accepted) return;
      // D1: the agent on this node gets the whole answer the call holds, whatever its step keeps of it.
      deps.relay.answered(input.jobId, relay.callId, { result: wholeAnswerOf(out), key: input.key });
      // Fault injection for the test of a node lost between the answer and the Update's completion (the answer is
      // written to its socket in the microtasks above; the workflow task takes several turns of the event loop).
      if (process.env.OZ0_TEST_FAULT === DIE_AFTER_EARLY_ANSWER)
        setImmediate(() => process.kill(process.pid, 'SIGKILL'));
    });
  });
  throw new CompleteAsyncError();
}

async function complete(deps: DurableDeps, taskToken: Uint8Array, out: CallOutput): Promise<boolean> {
  for (let n = 1; ; n++) {
    try {
      await deps.client.activity.complete(taskToken, out);
      return true;
    } catch (err) {
      // Gone (cancelled, timed out) is final: the workflow has its own word on the call, and the caller hears that.
      if (n >= COMPLETE_TRIES || err instanceof ActivityNotFoundError) {
        deps.logger.warn({ err: (err as Error).message }, 'a live call’s completion was not accepted');
        return false;
      }
      await new Promise((r) => setTimeout(r, 100 * 2 ** n));
    }
  }
}
