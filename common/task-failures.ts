/**
 * SPEC D3: the workflow tasks that fail on this process, as Temporal's SDK and core say so in their logs — the only
 * place a worker hears of them. A listener (worker/stuck.ts) tells a task that fails the same way on every try from a
 * passing failure, says it once, and has the SDK's own lines for each further try quieted.
 */
import type { LogMetadata } from '@temporalio/common';

/** One failed workflow task, as a log line of Temporal's names it. */
export interface TaskFailure {
  runId: string;
  workflowId?: string;
  reason: string;
}

/** What a listener makes of a failure: `quiet` has the line that told it go to debug (it has been said). */
export type Heard = 'quiet' | undefined;

const listeners = new Set<(failure: TaskFailure) => Heard>();

/** Listens to failed workflow tasks until the returned function is called. */
export function onTaskFailure(listener: (failure: TaskFailure) => Heard): () => void {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** Whether a line of Temporal's tells of a failed workflow task; if so, what its listeners make of it. */
export function heardTaskFailure(message: string, meta: LogMetadata | undefined): Heard {
  const failure = taskFailureOf(message, meta);
  if (!failure || listeners.size === 0) return undefined;
  let heard: Heard;
  for (const listener of listeners) heard = listener(failure) ?? heard;
  return heard;
}

/**
 * The TypeScript worker's "Failed to process Workflow Activation" (the activation could not be decoded, or the
 * workflow threw) and core's "Failing workflow task" (nondeterminism, a payload past Temporal's limit, and the
 * worker's own failures passed on): the run, the workflow when said, and the failure's message.
 */
export function taskFailureOf(message: string, meta: LogMetadata | undefined): TaskFailure | undefined {
  const runId = typeof meta?.runId === 'string' ? meta.runId : undefined;
  if (!runId) return undefined;
  const workflowId = typeof meta?.workflowId === 'string' ? meta.workflowId : undefined;
  let reason: string | undefined;
  if (message === 'Failed to process Workflow Activation') {
    const error = meta?.error as { message?: unknown } | undefined;
    reason = typeof error?.message === 'string' ? error.message : undefined;
  } else if (message === 'Failing workflow task') {
    // Core's failure in Rust's debug form: `Failure { failure: Some(Failure { message: "…", source: … } …`.
    const found = /message: "((?:[^"\\]|\\.)*)"/.exec(String(meta?.failure ?? ''));
    reason = found ? found[1].replace(/\\(.)/g, '$1') : undefined;
  } else return undefined;
  return { runId, ...(workflowId ? { workflowId } : {}), reason: (reason ?? 'no reason given').slice(0, 500) };
}

/** What would free a job stuck for this reason, when oz0 can tell. */
export function remedyOf(reason: string): string | undefined {
  if (/TMPRL1105|external storage is not configured/i.test(reason)) {
    return 'its history holds payloads in a store this node was not given: give it the same payloads.store as the nodes that wrote them';
  }
  if (/No driver registered with name/i.test(reason)) {
    return 'its history names a payload store this node has not: give it the payloads.store of the nodes that wrote them';
  }
  if (/TMPRL1103|exceeded the error limit/i.test(reason)) {
    return 'it carries a payload past Temporal’s limit: give the nodes a payload store (payloads.store)';
  }
  if (/TMPRL1100|Nondeterminism/i.test(reason)) {
    return 'this node’s workflow code differs from the code that ran the job: run the release that started it';
  }
  return undefined;
}
