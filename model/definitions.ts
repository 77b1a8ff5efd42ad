/**
 * What a job is, as the workflow, the node and the client all see it: the trace, queries, search-attribute keys,
 * failure types and what a call's activity takes and gives. Pure: the workflow bundle imports it. The spec's types
 * are inferred from its zod schema in ./schemas (imported as types only: zod stays out of the bundle).
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import type { AttemptRecord, CallStep, JobSpec, SessionStep } from './schemas';
import { tenantNameProblem, toolProblem } from './checks';

/** The workflow type name the client starts: `client.workflow.start('job', …)`. */
export const JOB_WORKFLOW = 'job';

/** A scripted session's calls, fixed in the spec; undefined for a live session (a harness's or a client's). */
export function scriptedCalls(step: SessionStep): CallStep[] | undefined {
  return Array.isArray(step.session) ? step.session : undefined;
}

/** Every tool a spec names, in first-use order (a live session's tools are known only as it makes its calls). */
export function toolsOf(spec: JobSpec): string[] {
  const tools = new Set<string>();
  for (const step of spec.steps) {
    if ('call' in step) tools.add(step.call);
    else for (const call of scriptedCalls(step) ?? []) tools.add(call.call);
  }
  return [...tools];
}

/**
 * What can be read off a job's input that failed its check: its tenant, when that field alone is a tenant's name,
 * and the tools of the steps that name one well, so a tenant's filter still finds its own failed job.
 */
export function knownOf(input: unknown): { tenant?: string; tools: string[] } {
  const { tenant, steps } = (input && typeof input === 'object' ? input : {}) as Record<string, unknown>;
  const tools = new Set<string>();
  const callsIn = (list: unknown) => (Array.isArray(list) ? list : []) as { call?: unknown }[];
  for (const step of callsIn(steps)) {
    const session = (step as { session?: unknown } | null)?.session;
    for (const call of [step, ...callsIn(session)]) {
      if (call && typeof call.call === 'string' && !toolProblem(call.call)) tools.add(call.call);
    }
  }
  return { ...(tenantNameProblem(tenant) ? {} : { tenant: tenant as string }), tools: [...tools] };
}

/** A tool's answer as the job (and a model) reads it. */
export interface ToolResult {
  isError: boolean;
  content: unknown[];
  structuredContent?: Record<string, unknown>;
}

export interface StepTrace {
  /** 1-based position of the call in the whole job, across continues-as-new. */
  n: number;
  tool: string;
  key: string;
  /** `s1`, `s2`, … for a call in a harness session; null outside one. */
  session: string | null;
  activityId: string;
  result: ToolResult;
  attempts: AttemptRecord[];
  /** The node that made the last attempt, when known. */
  node?: string;
  /** The MCP revision the last attempt spoke with the call's server (2026-07-28, 2025-11-25, …), when known. */
  protocol?: string;
  /** For a call in a session: 1 for the session's first run, 2 for the fresh session after a lost node, … */
  sessionRun?: number;
  /** A live session's call that has not ended yet: `result` and `attempts` are still empty. */
  running?: true;
  /** A4-A6: the call waited for a person's yes: when it was asked, and how it was answered (or why not). */
  question?: QuestionTrace;
}

/** A4-A6: a call's question and its answer, as its step keeps them. */
export interface QuestionTrace {
  /** When the call began to wait (ISO 8601, the workflow's clock). */
  askedAt: string;
  /** The policy pattern whose verdict is `confirm`. */
  pattern: string;
  /** A5: the person's answer: who, when, yes or no, and a denial's reason. */
  answer?: Answer;
  /** How the wait ended without an answer: its time limit, a change of policy, its session withdrew it, a cancel. */
  ended?: string;
}

/** A5: a person's answer to a call that waits. */
export interface Answer {
  approved: boolean;
  /** Who gave it, as they said (`--by`, default the OS user). */
  by: string;
  /** When the job received it (ISO 8601). */
  at: string;
  reason?: string;
}

/** One run of a live session: on which node, and how it ended (absent while it runs). */
export interface SessionRunTrace {
  run: number;
  node?: string;
  /** The client that opened an external session's run, as it named itself. */
  client?: string;
  /** Why the run ended: its harness exited, its client closed it, its node was lost, the job was cancelled, … */
  ended?: string;
}

/** A live session (a harness's, or an external client's: H1-H10) as its own step, holding its calls in order. */
export interface SessionTrace {
  /** `s1`, `s2`, …: the session's number in the job. */
  session: string;
  kind: 'harness' | 'external';
  /** The harness it runs (`harnesses.<name>`). */
  harness?: string;
  /** `waiting` for an external client to open it, `running`, or `ended`. */
  status: 'waiting' | 'running' | 'ended';
  runs: SessionRunTrace[];
  /** The session's result: the harness's last line on stdout, or what the client closed it with; or why it failed. */
  result?: ToolResult;
  /** Its calls, in the order the workflow accepted them, across its runs. */
  calls: StepTrace[];
  /** Calls left out of `calls` to keep the trace bounded. */
  omitted: number;
}

/** A step of the trace: a call (on its own or in a scripted session), or a live session holding its calls. */
export type TraceStep = StepTrace | SessionTrace;

export function isSessionTrace(step: TraceStep): step is SessionTrace {
  return 'runs' in step;
}

/** Every call of a trace, in job order: those of live sessions in their place. */
export function callsOf(trace: Pick<JobTrace, 'steps'>): StepTrace[] {
  return trace.steps.flatMap((step) => (isSessionTrace(step) ? step.calls : [step]));
}

/**
 * The job's own word on its run: its `status` query, its trace's `status` and the `Oz0Status` search attribute. While
 * the run is open, `running`, `waiting` (A4: a call waits for a person's yes) or `cancelling` (C4) — oz0's words, for
 * states Temporal has no name for; once the run has
 * decided how it ends, the status Temporal gives the closed run, spelt as Temporal's API and CLI spell it — the words
 * `oz0 job status` prints. A run that continued as new says `CONTINUED_AS_NEW`: only the job's current run is
 * `running`. A job terminated or timed out from outside keeps the last word its workflow said.
 */
export type JobStatus = 'running' | 'waiting' | 'cancelling' | 'COMPLETED' | 'CANCELED' | 'FAILED' | 'CONTINUED_AS_NEW';

/** What earlier versions of oz0 wrote in `Oz0Status` for a closed job, by the word that replaced it: filters look for both. */
export const LEGACY_STATUS: Partial<Record<JobStatus, string>> = { COMPLETED: 'completed', CANCELED: 'cancelled' };

export interface JobTrace {
  jobId: string;
  status: JobStatus;
  /** How many times the job continued as new so far (m in K2). */
  run: number;
  /** Calls made so far in the whole job. */
  calls: number;
  /** Steps left out of `steps` to keep the trace bounded across continues-as-new (T2). */
  omitted: number;
  steps: TraceStep[];
}

export const statusQuery = defineQuery<JobStatus>('status');
export const traceQuery = defineQuery<JobTrace>('trace');

/**
 * H9: a client opens the job's waiting external session. The answer names the session, its run (a session moved to
 * another node after its node was lost is opened again, as its next run) and the node its calls run on.
 */
export const openSessionUpdate = defineUpdate<SessionOpened, [OpenSessionInput]>('openSession');
/** H4: one call of a live session: the workflow decides its key, runs it on the session's node, answers its result. */
export const callToolUpdate = defineUpdate<SessionCallOutput, [SessionCallInput]>('callTool');
/** H5: stops one running call of a live session (`notifications/cancelled` to its server); false if it had ended. */
export const cancelCallUpdate = defineUpdate<boolean, [CancelCallInput]>('cancelCall');
/** H9: an external client ends its session with a result (an error result with `isError`). */
export const closeSessionUpdate = defineUpdate<void, [CloseSessionInput]>('closeSession');
/** H9: where a live session's running call is (its activity and key), by the caller's call id: its progress is there. */
export const sessionCallQuery = defineQuery<{ activityId: string; key: string } | null, [string]>('sessionCall');

/** A5: a person's answer to a call that waits for one (`oz0 call approve|deny`, or any Temporal client). */
export const answerCallUpdate = defineUpdate<CallAnswered, [AnswerCallInput]>('answerCall');
/** A4: the job's calls that wait for a person's yes now, oldest first. */
export const waitingCallsQuery = defineQuery<WaitingCall[]>('waitingCalls');
/** A4: a tenant's policy workflow tells the job that a change may end its call's wait: the job looks again. */
export const policyChangedSignal = defineSignal<[PolicyNews]>('policyChanged');

export interface AnswerCallInput {
  /** Which call: its number (the trace's `#`), its activity id (`c3`) or its key; none when only one waits. */
  call?: string;
  approve: boolean;
  /** Who answers, for the trace (1-200 characters): a person's name or login. */
  by: string;
  /** Why, at most 1000 characters; a denial's reason reaches the model in the call's error result. */
  reason?: string;
}

/** What the job did with an answer: the call it went to, and the answer as the trace keeps it. */
export interface CallAnswered extends Answer {
  n: number;
  activityId: string;
  tool: string;
  key: string;
}

/** A4: a call that waits for a person's yes, as `oz0 call list` and the job's current details show it. */
export interface WaitingCall {
  n: number;
  activityId: string;
  tool: string;
  key: string;
  session: string | null;
  sessionRun?: number;
  /** Its arguments as a person reads them: JSON, secrets redacted as in logs, cut at 2,000 characters. */
  args: string;
  /** The policy pattern whose verdict is `confirm`. */
  pattern: string;
  askedAt: string;
  /** When it is refused unanswered (`confirmTimeoutSeconds`). */
  until: string;
}

export interface PolicyNews {
  /** The waiting call's key. */
  key: string;
  tenant: string;
  version: number;
  /** What changed, in words: `ledger.refund: deny`, `the kill switch for ledger.*`. */
  change: string;
}

export interface OpenSessionInput {
  /** Who opens it, for the trace (e.g. the client's host), at most 200 characters. */
  client?: string;
}

export interface SessionOpened {
  session: string;
  run: number;
  node: string;
}

export interface SessionCallInput {
  session: string;
  run: number;
  /** The caller's id for the call, unique in the session run: what cancelCall names. */
  callId: string;
  tool: string;
  args?: Record<string, unknown>;
  /** H6: the caller wants the call's progress (the node asks its server for it). */
  progress?: boolean;
}

export interface SessionCallOutput {
  result: ToolResult & { _meta?: Record<string, unknown> };
  /** The call's idempotency key (K3 or K2); absent for a call refused before it was placed (H10). */
  key?: string;
  /** The call's position in the whole job (its step's `n`); absent for a call refused before it was placed. */
  n?: number;
}

export interface CancelCallInput {
  session: string;
  run: number;
  callId: string;
  /** Why, as the caller says it; sent on to the server in `notifications/cancelled`. */
  reason?: string;
}

export interface CloseSessionInput {
  session: string;
  run: number;
  /** The session's result: any JSON (a string is text). */
  result?: unknown;
  /** The result is an error result. */
  isError?: boolean;
}

/** Search attributes oz0 registers itself and keeps up to date (T3). */
export const Oz0Status = defineSearchAttributeKey('Oz0Status', SearchAttributeType.KEYWORD);
export const Oz0Tenant = defineSearchAttributeKey('Oz0Tenant', SearchAttributeType.KEYWORD);
export const Oz0Tools = defineSearchAttributeKey('Oz0Tools', SearchAttributeType.KEYWORD_LIST);

/** Failure types oz0 raises on purpose (ApplicationFailure.type). */
export const FailureType = {
  badSpec: 'Oz0BadSpec',
  /** The call may have run on an attempt that was lost, and may not be made again. */
  mayHaveRun: 'Oz0MayHaveRun',
  /** An attempt failed: the server crashed, hung, or answered garbage. */
  attemptFailed: 'Oz0AttemptFailed',
  /** The attempt stopped itself at the tool's time limit (C6). */
  timeLimit: 'Oz0TimeLimit',
  /** The server is busy and the call is tried again after its wait (B2). */
  busy: 'Oz0Busy',
  /** The tenant's policy refused the call: denied, killed, or its listing needs approval (A1-A3, B6, C5). */
  refused: 'Oz0Refused',
  /** A kill switch stopped the running call (C5). */
  killed: 'Oz0Killed',
  /** The node shut down mid-call (past its grace time). */
  nodeShutdown: 'Oz0NodeShutdown',
  /** The node has no server of that name, or the server has no such function. */
  unknownTool: 'Oz0UnknownTool',
  /** A live session's caller stopped the call (H5): it ends, the job goes on. */
  callCancelled: 'Oz0CallCancelled',
} as const;

/** One call, as the workflow asks a node to make it. */
export interface CallInput {
  /** H5/H6: a live session's call, by the id its caller gave: its progress is relayed, and it can be stopped by it. */
  relay?: { callId: string; progress: boolean };
  jobId: string;
  tenant: string;
  tool: string;
  args: Record<string, unknown>;
  key: string;
  session: string | null;
  timeoutSeconds: number;
  maxAttempts: number;
  /** A5: a person's yes to this call (its key): every attempt of it runs under it, and no other call does. */
  confirmed?: { key: string; by: string; at: string };
  /** A6: how long its question may wait, so its policy workflow can forget one never said to have ended. */
  confirmTimeoutSeconds?: number;
}

/** A4: an attempt found that the call waits for a person's yes, and sent nothing. */
export interface CallAsks {
  asks: {
    /** The policy pattern whose verdict is `confirm`. */
    pattern: string;
    /** The arguments as a person reads them: JSON, secrets redacted, cut at 2,000 characters. */
    args: string;
  };
  node: string;
  sandboxQueues?: string[];
}

export interface CallOutput {
  result: ToolResult & { _meta?: Record<string, unknown> };
  attempts: AttemptRecord[];
  node: string;
  /** The MCP revision the attempt that answered spoke with the server. */
  protocol?: string;
  /** The node queues where this call's attempts left a sandboxed server of the job running. */
  sandboxQueues?: string[];
}

/** What a node says when a session opens on it (T4), or of a live session's new tool: its hints and settings. */
export interface SessionPlan {
  idempotent: Record<string, boolean>;
  mayRetry: Record<string, boolean>;
  /** The settings of each tool described (a live session's tools are not known when the job starts). */
  settings: Record<string, ToolSettings>;
  node: { id: string; queue: string };
}

/** H2/H7: a harness run, as the workflow asks the session's node to start it. */
export interface HarnessInput {
  jobId: string;
  tenant: string;
  harness: string;
  /** `s1`, `s2`, … */
  session: string;
  sessionRun: number;
  input: unknown;
}

/** H7: how a harness run ended: its result (the last stdout line), or an error result that says which way it failed. */
export interface HarnessOutcome {
  result: ToolResult;
  /** How it ended, in words: `exited 0`, `exited 3`, `killed by SIGSEGV`, `ran past its timeout of 600 s`. */
  ended: string;
}

/** A6: how long a call waits for a person's answer unless its tool says otherwise (`confirmTimeoutSeconds`). */
export const DEFAULT_CONFIRM_TIMEOUT_SECONDS = 24 * 3600;

/** Per-tool settings the node resolves from its config for a job. */
export interface ToolSettings {
  timeoutSeconds: number;
  maxAttempts: number;
  /** A6; absent in jobs started before oz0 had it: the default then. */
  confirmTimeoutSeconds?: number;
}

export interface JobSettings {
  tools: Record<string, ToolSettings>;
  continueAsNewAfterCalls: number;
  heartbeatTimeoutSeconds: number;
  /** H10. */
  maxCallsPerSession: number;
  /** The time limits of the harnesses the spec names (H1, H7). */
  harnesses: Record<string, { timeoutSeconds: number; tools: string[] }>;
}

/** What a job carries into its next run when it continues as new (T2). */
export interface JobCarry {
  run: number;
  calls: number;
  sessions: number;
  omitted: number;
  traceTail: TraceStep[];
  sandboxQueues: string[];
}
