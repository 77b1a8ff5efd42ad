/**
 * A small typed client over @temporalio/client: start (spec validated first), status, trace, cancel. The
 * CLI and the demo use it; a plain `client.workflow.start('job', …)` works just as well.
 */
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import type { ConnectionOptions, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { decodeOptionalFailureToOptionalError } from '@temporalio/common/lib/internal-non-workflow';
import { assertReachable, connectionOptions, temporalUnreachable } from '../common/connection';
import { newSessionToken } from '../common/session-token';
import { JOB_WORKFLOW, LEGACY_STATUS, Oz0Status, Oz0Tenant } from '../model/job';
import { statusQuery, traceQuery } from '../model/messages';
import type { JobWorkflow } from '../model/messages';
import { JobIdSchema, JobSpecError, parseJobSpec } from '../model/schemas';
import { jobPriority, priorityProblem } from '../model/shares';
import { sharesOf } from '../model/policy-rules';
import { readPolicy } from '../common/policy-client';
import type { PolicyTarget } from '../common/policy-client';
import { jobDetails, jobSummary } from '../model/details';
import type { JobStatus, JobTrace } from '../model/job';
import { parseConfig } from '../common/config';
import { remedyOf } from '../common/task-failures';
import type { Config, LoadedConfig } from '../common/config';
import { processDataOf } from '../data';
import type { ProcessData } from '../data';
import { earlierRuns, mergedSteps, wholeAnswers } from './runs';

export interface JobClient {
  client: Client;
  taskQueue: string;
  /** D2: how its payloads are stored and read, and the answers a job keeps in the store (data/). */
  data: ProcessData;
  /** The harnesses the config names: a spec naming another is refused before it starts (H1). */
  harnesses?: readonly string[];
  /** F4: where the tenants' shares are: a priority ahead of what its tenant may ask is refused before it starts. */
  policy?: PolicyTarget;
  close(): Promise<void>;
}

/** What a client needs of a config: where Temporal is, and where payloads are stored (a loaded config has both). */
export type JobClientConfig = Pick<LoadedConfig, 'temporal' | 'payloads' | 'node' | 'baseDir'>;

/**
 * Connects to Temporal with oz0's data converter (D2: big payloads in the config's store). A config's `temporal`
 * section alone (as before the store) reads and writes the store of the defaults: `.oz0/payloads` here.
 */
export async function connectJobClient(config: JobClientConfig | Config['temporal']): Promise<JobClient> {
  const full: JobClientConfig =
    'temporal' in config ? config : { ...parseConfig({ temporal: config }), baseDir: process.cwd() };
  const { temporal } = full;
  await assertReachable(temporal);
  const data = processDataOf(full);
  const connection = await Connection.connect(connectionOptions(temporal) as ConnectionOptions).catch((err: Error) => {
    throw temporalUnreachable(temporal.address, err.message);
  });
  const client = new Client({ connection, namespace: temporal.namespace, dataConverter: data.dataConverter });
  data.useClient(client);
  return { client, taskQueue: temporal.taskQueue, data, close: () => connection.close() };
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
  jc: Pick<JobClient, 'client' | 'taskQueue' | 'harnesses' | 'policy'> & { data?: Pick<ProcessData, 'owners'> },
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
  // D2: a spec past the threshold goes to the store under its tenant.
  jc.data?.owners.learn(workflowId, valid.tenant);
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

/**
 * `running`, `waiting`, `cancelling`, `stuck` (D3: its workflow task failed at least twice and is tried again: see
 * {@link stuckOf}), or Temporal's final status (COMPLETED, CANCELED, FAILED, TERMINATED, TIMED_OUT).
 */
export async function jobStatus(client: Client, jobId: string): Promise<string> {
  const handle = client.workflow.getHandle(jobId);
  const description = await handle.describe();
  if (description.status.name !== 'RUNNING') return shownStatus(description.status.name, undefined);
  if ((description.raw.pendingWorkflowTask?.attempt ?? 0) >= STUCK_TRIES) return 'stuck';
  // No worker has picked the job up yet: no answer. A key this process lacks is said, never taken for that (D4).
  const own = await handle.query(statusQuery).catch((err: unknown) => {
    if ((err as Error)?.name === 'KeyMissing') throw err;
    return undefined;
  });
  return shownStatus('RUNNING', own);
}

/** D3: a job's workflow task that failed this many times in a row is stuck, not passing trouble. */
const STUCK_TRIES = 3;

/** D3: why a job is stuck: how often its workflow task failed, the failure Temporal recorded, and what would free it. */
export interface Stuck {
  tries: number;
  why: string;
  remedy?: string;
}

/** D3: a running job whose workflow task fails on every try, and why (Temporal records the first failure of the run). */
export async function stuckOf(client: Client, jobId: string): Promise<Stuck | undefined> {
  const description = await client.workflow.getHandle(jobId).describe();
  const tries = description.raw.pendingWorkflowTask?.attempt ?? 0;
  if (description.status.name !== 'RUNNING' || tries < STUCK_TRIES) return undefined;
  const { history } = await client.workflowService.getWorkflowExecutionHistoryReverse({
    namespace: client.options.namespace,
    execution: { workflowId: jobId, runId: description.runId },
    maximumPageSize: 20,
  });
  const failed = history?.events?.find((e) => e.workflowTaskFailedEventAttributes);
  const failure = failed?.workflowTaskFailedEventAttributes?.failure;
  // D4: the worker's failure is sealed like any other (its message may quote the job's data): opened here.
  const context = { type: 'workflow' as const, namespace: client.options.namespace, workflowId: jobId };
  const opened = failure
    ? await decodeOptionalFailureToOptionalError(client.options.loadedDataConverter, failure, context).catch(
        (err: Error) => new Error(`${failure.message ?? 'a failure'} (not opened here: ${err.message})`),
      )
    : undefined;
  const why = opened?.message || 'Temporal recorded no reason';
  const remedy = remedyOf(why);
  return { tries, why, ...(remedy ? { remedy } : {}) };
}

/**
 * A trace as the CLI shows it: `status` is what `oz0 job status` prints; `earlier`, why the runs before some run could
 * not be read (retention removed them, or their store is not this process's).
 */
export type ShownTrace = Omit<JobTrace, 'status'> & { status: string; earlier?: string };

/**
 * The job's trace, with the status `oz0 job status` would print. With `data`, every run's steps (D3: each run's start
 * holds the run before it); with `whole` too, each answer kept in the store read back whole (D1).
 */
export async function jobTrace(
  client: Client,
  jobId: string,
  opts: { data?: ProcessData; whole?: boolean } = {},
): Promise<ShownTrace> {
  const status = await jobStatus(client, jobId);
  const handle = client.workflow.getHandle(jobId);
  let trace: JobTrace;
  try {
    // A completed job's result is its trace: no worker needed to read it.
    trace = status === 'COMPLETED' ? await handle.result() : await handle.query(traceQuery);
  } catch {
    // A job that failed before it set its handlers (a bad spec) has no trace to query.
    return { jobId, status, run: 0, calls: 0, omitted: 0, steps: [] };
  }
  const { data } = opts;
  if (!data) return { ...trace, status };
  const described = await handle.describe();
  const tenant = described.typedSearchAttributes.get(Oz0Tenant) ?? '';
  let steps = trace.steps;
  let omitted = trace.omitted;
  let earlier: string | undefined;
  if (trace.run > 0 && trace.omitted > 0) {
    const runs = await earlierRuns(client, data, jobId, described.runId);
    steps = mergedSteps(runs.steps, trace.steps);
    omitted = runs.omitted;
    earlier = runs.stopped;
  }
  if (opts.whole) steps = await wholeAnswers(data, steps, { jobId, tenant });
  return { ...trace, status, steps, omitted, ...(earlier ? { earlier } : {}) };
}

export async function cancelJob(client: Client, jobId: string): Promise<void> {
  await client.workflow.getHandle(jobId).cancel();
}

export { WorkflowNotFoundError };
