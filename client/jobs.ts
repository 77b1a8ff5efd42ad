/**
 * A small typed client over @temporalio/client: start (spec validated first), status, trace, cancel. The
 * CLI and the demo use it; a plain `client.workflow.start('job', …)` works just as well.
 */
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import type { ConnectionOptions, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { assertReachable, connectionOptions, temporalUnreachable } from '../common/connection';
import { newSessionToken } from '../common/session-token';
import { JOB_WORKFLOW, LEGACY_STATUS, Oz0Status } from '../model/job';
import { statusQuery, traceQuery } from '../model/messages';
import type { JobWorkflow } from '../model/messages';
import { JobIdSchema, JobSpecError, parseJobSpec } from '../model/schemas';
import { jobPriority, priorityProblem } from '../model/shares';
import { sharesOf } from '../model/policy-rules';
import { readPolicy } from '../common/policy-client';
import type { PolicyTarget } from '../common/policy-client';
import { jobDetails, jobSummary } from '../model/details';
import type { JobStatus, JobTrace } from '../model/job';
import type { Config } from '../common/config';

export interface JobClient {
  client: Client;
  taskQueue: string;
  /** The harnesses the config names: a spec naming another is refused before it starts (H1). */
  harnesses?: readonly string[];
  /** F4: where the tenants' shares are: a priority ahead of what its tenant may ask is refused before it starts. */
  policy?: PolicyTarget;
  close(): Promise<void>;
}

export async function connectJobClient(temporal: Config['temporal']): Promise<JobClient> {
  await assertReachable(temporal);
  const connection = await Connection.connect(connectionOptions(temporal) as ConnectionOptions).catch((err: Error) => {
    throw temporalUnreachable(temporal.address, err.message);
  });
  return {
    client: new Client({ connection, namespace: temporal.namespace }),
    taskQueue: temporal.taskQueue,
    close: () => connection.close(),
  };
}

/** I14: the token of one external session of a job, for its agent (a secret: never logged, never in Temporal). */
export interface SessionToken {
  /** The index of its step in the spec's `steps`. */
  step: number;
  token: string;
}

/** A started job: its handle, and a token for each of its external sessions' agents (I14). */
export type StartedJob = WorkflowHandleWithFirstExecutionRunId<JobWorkflow> & { sessionTokens: SessionToken[] };

/**
 * Starts a job; a bad spec is refused here, before any workflow starts, naming the field (JobSpecError). The job gets
 * a summary and details that the Temporal UI shows (`jobSummary`, `jobDetails`), and its tenant as Temporal's fairness
 * key with the priority its spec asks (`jobPriority`, F1, F4).
 */
export async function startJob(
  jc: Pick<JobClient, 'client' | 'taskQueue' | 'harnesses' | 'policy'>,
  spec: unknown,
  opts: { workflowId?: string } = {},
): Promise<StartedJob> {
  const valid = parseJobSpec(spec, { harnesses: jc.harnesses });
  // I11: a job's id is checked as its spec is: one of the platform's own (`oz0-policy/…`) is refused before it starts.
  if (opts.workflowId !== undefined) {
    const id = JobIdSchema.safeParse(opts.workflowId);
    if (!id.success) {
      const message = id.error.issues[0].message;
      throw new JobSpecError(`bad job id: ${message}`, [{ path: 'id', message }]);
    }
  }
  if (valid.priority !== undefined && jc.policy) {
    const { maxPriority } = sharesOf(await readPolicy(jc.policy, valid.tenant), jc.policy.shareSeeds[valid.tenant]);
    const problem = priorityProblem(valid.priority, maxPriority);
    if (problem) throw new JobSpecError(`bad job spec: priority: ${problem}`, [{ path: 'priority', message: problem }]);
  }
  const workflowId =
    opts.workflowId ??
    `job-${new Date()
      .toISOString()
      .replace(/[-:.TZ]/g, '')
      .slice(0, 14)}-${Math.random().toString(36).slice(2, 8)}`;
  // I14: each external session gets a token for its agent, the spec its digest; the tokens go back to the caller only.
  const sessionTokens: SessionToken[] = [];
  const steps = valid.steps.map((step, i) => {
    if (!('session' in step) || Array.isArray(step.session) || !('external' in step.session)) return step;
    if (step.session.tokenDigest) return step;
    const { token, digest } = newSessionToken(workflowId);
    sessionTokens.push({ step: i, token });
    return { ...step, session: { ...step.session, tokenDigest: digest } };
  });
  const handle = await jc.client.workflow.start<JobWorkflow>(JOB_WORKFLOW, {
    taskQueue: jc.taskQueue,
    workflowId,
    args: [{ ...valid, steps }],
    // T3: what the Temporal UI and CLI show of the job beside its type: who, its steps, its tools.
    staticSummary: jobSummary(valid),
    staticDetails: jobDetails(valid),
    priority: jobPriority(valid),
  });
  return Object.assign(handle, { sessionTokens });
}

/**
 * What `oz0 job status` shows, from Temporal's status of the run and the job's own word (its `status` query, when
 * the run is open and answered): `running`, `waiting` (a call waits for a person's yes, A4), `cancelling`, or
 * Temporal's final status (COMPLETED, CANCELED, FAILED, TERMINATED, TIMED_OUT). Pure, so every case is table-tested.
 */
export function shownStatus(temporalStatus: string, own: JobStatus | string | undefined): string {
  // The TS client spells it CANCELLED; Temporal's API, UI and CLI say CANCELED.
  const status = temporalStatus === 'CANCELLED' ? 'CANCELED' : temporalStatus;
  // The run the job id led to continued as new: the job itself runs on in its next run.
  if (status === 'CONTINUED_AS_NEW') return 'running';
  if (status !== 'RUNNING') return status;
  // A job that has done its work says so in the task that closes it; until Temporal has recorded the close, it is
  // still running (or cancelling, C4), and the final word is Temporal's own status. No answer: no worker yet. An
  // older node may still answer `cancelled`.
  if (own === 'waiting') return 'waiting';
  return own === 'cancelling' || own === 'CANCELED' || own === LEGACY_STATUS.CANCELED ? 'cancelling' : 'running';
}

/**
 * A list filter (Temporal's visibility query) for the jobs whose `Oz0Status` says `status`, with what earlier versions
 * of oz0 wrote for it: `statusFilter('CANCELED')` is `Oz0Status IN ("CANCELED", "cancelled")`.
 */
export function statusFilter(status: JobStatus): string {
  const legacy = LEGACY_STATUS[status];
  return legacy ? `${Oz0Status.name} IN ("${status}", "${legacy}")` : `${Oz0Status.name} = "${status}"`;
}

/** `running`, `waiting`, `cancelling`, or Temporal's final status (COMPLETED, CANCELED, FAILED, TERMINATED, TIMED_OUT). */
export async function jobStatus(client: Client, jobId: string): Promise<string> {
  const handle = client.workflow.getHandle(jobId);
  const description = await handle.describe();
  if (description.status.name !== 'RUNNING') return shownStatus(description.status.name, undefined);
  // No worker has picked the job up yet: no answer.
  const own = await handle.query(statusQuery).catch(() => undefined);
  return shownStatus('RUNNING', own);
}

/** A trace as the CLI shows it: `status` is what `oz0 job status` prints. */
export type ShownTrace = Omit<JobTrace, 'status'> & { status: string };

/** The job's trace, with the status `oz0 job status` would print. */
export async function jobTrace(client: Client, jobId: string): Promise<ShownTrace> {
  const status = await jobStatus(client, jobId);
  const handle = client.workflow.getHandle(jobId);
  try {
    // A completed job's result is its trace: no worker needed to read it.
    const trace: JobTrace = status === 'COMPLETED' ? await handle.result() : await handle.query(traceQuery);
    return { ...trace, status };
  } catch {
    // A job that failed before it set its handlers (a bad spec) has no trace to query.
    return { jobId, status, run: 0, calls: 0, omitted: 0, steps: [] };
  }
}

export async function cancelJob(client: Client, jobId: string): Promise<void> {
  await client.workflow.getHandle(jobId).cancel();
}

export { WorkflowNotFoundError };
