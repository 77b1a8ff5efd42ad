/**
 * SPEC D3: a job whose workflow task fails the same way on every try is never retried in silence. Temporal tries such a
 * task again and again (every ten seconds once it has failed twice), and its SDK logs every try; a node that hears a
 * run's task fail twice the same way says once, at error level, which job is stuck and why, with what would free it,
 * and has the SDK's lines for each further try go to debug. A task that then fails another way is said anew; a run
 * not heard of for a while is forgotten. `oz0 job status` says the same from Temporal's side (client/jobs.ts).
 */
import type { Client } from '@temporalio/client';
import type { Logger } from '../common/logger';
import { onTaskFailure, remedyOf } from '../common/task-failures';
import type { Heard, TaskFailure } from '../common/task-failures';

/** A run whose task has not failed for this long is forgotten: its next failure is a first one again. */
const FORGET_MS = 10 * 60_000;
/** Two lines within this of each other tell of one try (the worker's, then core's). */
const ONE_TRY_MS = 1000;
/** Runs followed at once. */
const MAX_RUNS = 10_000;

interface Followed {
  reason: string;
  tries: number;
  lastAt: number;
  said: boolean;
}

export class StuckWatch {
  private readonly runs = new Map<string, Followed>();
  private readonly unlisten: () => void;

  constructor(
    private readonly client: Client,
    private readonly logger: Logger,
    private readonly now = () => Date.now(),
  ) {
    this.unlisten = onTaskFailure((failure) => this.heard(failure));
  }

  close(): void {
    this.unlisten();
  }

  /** A failed task: a first one passes as the SDK logs it; the second the same way is said once; the rest are quiet. */
  heard(failure: TaskFailure): Heard {
    const now = this.now();
    let run = this.runs.get(failure.runId);
    if (!run || run.reason !== failure.reason || now - run.lastAt > FORGET_MS) {
      run = { reason: failure.reason, tries: 0, lastAt: 0, said: false };
      this.runs.delete(failure.runId);
      this.runs.set(failure.runId, run);
      if (this.runs.size > MAX_RUNS) this.runs.delete(this.runs.keys().next().value!);
    }
    if (now - run.lastAt > ONE_TRY_MS) run.tries++;
    run.lastAt = now;
    if (run.said) return 'quiet';
    if (run.tries < 2) return undefined;
    run.said = true;
    void this.say(failure, run);
    return 'quiet';
  }

  private async say(failure: TaskFailure, run: Followed): Promise<void> {
    const jobId = failure.workflowId ?? (await this.workflowOf(failure.runId));
    const remedy = remedyOf(run.reason);
    this.logger.error(
      { jobId, runId: failure.runId, tries: run.tries, reason: run.reason, ...(remedy ? { remedy } : {}) },
      `job ${jobId ?? `(run ${failure.runId})`} is stuck: its workflow task failed ${run.tries} times the same way, ` +
        `and Temporal tries it again every 10 s until that changes: ${run.reason}` +
        (remedy ? ` — ${remedy}` : ''),
    );
  }

  /** The workflow a run belongs to (core names only the run). */
  private async workflowOf(runId: string): Promise<string | undefined> {
    try {
      for await (const found of this.client.workflow.list({ query: `RunId = "${runId}"`, pageSize: 1 })) {
        return found.workflowId;
      }
    } catch {
      // Visibility unreachable: the run's id says enough to find it.
    }
    return undefined;
  }
}
