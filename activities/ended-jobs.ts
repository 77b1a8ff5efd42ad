/**
 * I9: every end of a job stops its sandboxes. A job that completes, fails or is cancelled stops them itself (its last
 * activity, workflows/job.ts); one that is terminated from Temporal or runs past its time runs no more code, and one
 * whose stop activity never reached this node leaves them too. So the node asks: every `node.sandboxCheckSeconds` it
 * describes the job of each sandboxed server and harness it holds (a few at a time), and stops those whose job is no
 * longer running — closed in any way, gone from Temporal, or its id taken by another tenant's job.
 */
import type { Client } from '@temporalio/client';
import { WorkflowNotFoundError } from '@temporalio/client';
import type { Logger } from '../common/logger';
import type { JobRef } from './sandbox/folders';

/** What holds processes of jobs on this node: the pool's sandboxed servers, the running harnesses. */
export interface JobHolder {
  jobs(): JobRef[];
  /** Stops what it holds of this job, saying why; resolves once they are gone. */
  release(owner: JobRef, why: string): Promise<unknown>;
}

/** Describes in flight at once: a node with many jobs asks Temporal a few at a time. */
const AT_ONCE = 8;

/** The harnesses running on this node, each with how to stop it (./harness/run.ts). */
export class RunningHarnesses implements JobHolder {
  private readonly runs = new Map<symbol, { owner: JobRef; stop(why: string): void }>();

  /** A harness run of `owner`; the returned function takes it off once it ended. */
  add(owner: JobRef, stop: (why: string) => void): () => void {
    const id = Symbol(owner.jobId);
    this.runs.set(id, { owner, stop });
    return () => this.runs.delete(id);
  }

  jobs(): JobRef[] {
    return [...this.runs.values()].map((r) => r.owner);
  }

  async release(owner: JobRef, why: string): Promise<void> {
    for (const run of this.runs.values()) {
      if (run.owner.jobId === owner.jobId && run.owner.tenant === owner.tenant) run.stop(why);
    }
  }
}

export class EndedJobs {
  private timer?: NodeJS.Timeout;
  private sweeping?: Promise<void>;

  constructor(
    private readonly client: Client,
    private readonly holders: JobHolder[],
    private readonly logger: Logger,
    private readonly everyMs: number,
  ) {}

  start(): void {
    this.timer = setInterval(() => void this.sweep(), this.everyMs);
    this.timer.unref();
  }

  async close(): Promise<void> {
    clearInterval(this.timer);
    await this.sweeping;
  }

  /** One round: each job held here described once, and what ended released. One round at a time. */
  sweep(): Promise<void> {
    this.sweeping ??= this.round().finally(() => (this.sweeping = undefined));
    return this.sweeping;
  }

  private async round(): Promise<void> {
    const owners = new Map<string, JobRef>();
    for (const holder of this.holders)
      for (const o of holder.jobs()) owners.set(JSON.stringify([o.tenant, o.jobId]), o);
    const queue = [...owners.values()];
    const next = async (): Promise<void> => {
      for (let owner = queue.shift(); owner; owner = queue.shift()) {
        const why = await this.endedWhy(owner);
        if (!why) continue;
        this.logger.info(
          { jobId: owner.jobId, tenant: owner.tenant, why },
          'stopping the sandboxes of a job that ended',
        );
        await Promise.all(this.holders.map((h) => h.release(owner, why)));
      }
    };
    await Promise.all(Array.from({ length: Math.min(AT_ONCE, queue.length) }, next));
  }

  /** Why a job no longer runs (`its job was TERMINATED`), or undefined while it runs (or Temporal cannot say now). */
  private async endedWhy(owner: JobRef): Promise<string | undefined> {
    try {
      const run = await this.client.workflow.getHandle(owner.jobId).describe();
      if (run.status.name !== 'RUNNING') return `its job was ${run.status.name}`;
      const tenant = run.typedSearchAttributes.getAll().find((p) => p.key.name === 'Oz0Tenant')?.value;
      if (tenant !== undefined && tenant !== owner.tenant) return 'its job id now names another tenant’s job';
      return undefined;
    } catch (err) {
      if (err instanceof WorkflowNotFoundError) return 'its job is no longer known to Temporal';
      this.logger.debug({ jobId: owner.jobId, err: (err as Error).message }, 'could not ask whether a job still runs');
      return undefined;
    }
  }
}
