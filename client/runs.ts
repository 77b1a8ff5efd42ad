/**
 * SPEC D3: a job's trace across its runs. A run that continued as new handed its steps whole to the next (answers as
 * claims: nothing there grows with them), so each run's start in history holds the steps of the run before it: the
 * trace of the job is read back run by run, from the current one to the first still kept (the namespace's retention
 * removes the oldest), one history event each. Answers kept in the store are read back whole only when asked.
 */
import type { Client } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import type { ProcessData } from '../data';
import { isSessionTrace } from '../model/job';
import type { JobCarry, ToolResult, TraceStep } from '../model/job';

/** The steps of a job's earlier runs (oldest first), and how many runs could not be read. */
export interface EarlierRuns {
  steps: TraceStep[];
  /** Runs read, past the current one. */
  runs: number;
  /** Steps of the job before the oldest read (a run's own past its thousand, or runs past retention). */
  omitted: number;
  /** Why the walk stopped before the first run (a run past retention, a store this process lacks), if it did. */
  stopped?: string;
}

/** The steps every earlier run of the job handed on, walking back from `runId` (the current run). */
export async function earlierRuns(
  client: Client,
  data: ProcessData,
  jobId: string,
  runId: string,
): Promise<EarlierRuns> {
  const pages: TraceStep[][] = [];
  let omitted = 0;
  const { namespace } = client.options;
  let at: string | undefined = runId;
  let stopped: string | undefined;
  while (at) {
    let started: temporal.api.history.v1.IWorkflowExecutionStartedEventAttributes | null | undefined;
    try {
      const history: temporal.api.workflowservice.v1.IGetWorkflowExecutionHistoryResponse =
        await client.workflowService.getWorkflowExecutionHistory({
          namespace,
          execution: { workflowId: jobId, runId: at },
          maximumPageSize: 1,
        });
      started = history.history?.events?.[0]?.workflowExecutionStartedEventAttributes;
    } catch (err) {
      stopped = `run ${at} could not be read: ${(err as Error).message}`;
      break;
    }
    if (!started?.continuedExecutionRunId) break;
    try {
      const [, carry] = await data.valuesOf(started.input?.payloads ?? [], {
        type: 'workflow',
        namespace,
        workflowId: jobId,
      });
      pages.unshift((carry as JobCarry | undefined)?.traceTail ?? []);
      omitted = (carry as JobCarry | undefined)?.omitted ?? 0;
    } catch (err) {
      stopped = `the steps run ${at} was handed could not be read: ${(err as Error).message}`;
      break;
    }
    at = started.continuedExecutionRunId;
  }
  return { steps: pages.flat(), runs: pages.length, omitted, ...(stopped ? { stopped } : {}) };
}

/** Steps in job order, each once: a run's trace repeats the tail of the run before it. */
export function mergedSteps(...lists: TraceStep[][]): TraceStep[] {
  const seen = new Set<string>();
  const out: TraceStep[] = [];
  for (const step of lists.flat()) {
    const id = isSessionTrace(step) ? `session ${step.session}` : `call ${step.n}`;
    if (seen.has(id)) continue;
    seen.add(id);
    out.push(step);
  }
  return out;
}

/** A stored answer read whole, or the claim with why it could not be. */
export type ShownResult = ToolResult & { unreadable?: string };

/** D1: every stored answer of the steps read whole from the store, for the job's own tenant. */
export async function wholeAnswers(
  data: ProcessData,
  steps: TraceStep[],
  at: { jobId: string; tenant: string },
): Promise<TraceStep[]> {
  const whole = async (result: ToolResult): Promise<ShownResult> => {
    if (!result.stored) return result;
    try {
      return { ...(await data.answers.read(result, at)), stored: result.stored };
    } catch (err) {
      return { ...result, unreadable: (err as Error).message };
    }
  };
  const out: TraceStep[] = [];
  // One answer at a time: each may be tens of MiB.
  for (const step of steps) {
    if (!isSessionTrace(step)) {
      out.push({ ...step, result: await whole(step.result) });
      continue;
    }
    const calls = [];
    for (const call of step.calls) calls.push({ ...call, result: await whole(call.result) });
    out.push({ ...step, calls });
  }
  return out;
}
