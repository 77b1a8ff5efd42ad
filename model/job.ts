/**
 * What a job is, as the workflow, the node and the client all see it: its workflow type, the tools its spec names, its
 * trace and status, its search-attribute keys, and what it carries into its next run. Pure: the workflow bundle imports
 * it. The spec's types are inferred from its zod schema in ./schemas (imported as types only: zod stays out of the
 * bundle).
 */
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

/**
 * A tool's answer as the job (and a model) reads it. An answer past `payloads.answerInlineKiB` is kept in the payload
 * store by its call: its step holds `stored`, the claim, and an empty `content` (D3: the trace carries references, not
 * copies); `oz0 job trace`, a live session's agent and `readAnswer` read it whole.
 */
export interface ToolResult {
  isError: boolean;
  content: unknown[];
  structuredContent?: Record<string, unknown>;
  stored?: StoredAnswer;
}

/** D1-D3: where an answer kept in the payload store lies, and what it holds. */
export interface StoredAnswer {
  /** The store's name (`oz0.folder`, `oz0.s3`), as Temporal's External Storage names it in a claim. */
  driver: string;
  /** The store's claim: the object's bucket and key, its SHA-256 (checked on every read) and its owner. */
  claim: Record<string, string>;
  /** The answer's size as its server sent it, about (bytes). */
  bytes: number;
  /** What it holds, for a person: `text 3.0 MiB`, `image/png 1.5 MiB, text 120 B`. */
  holds: string;
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
  /** F2, F3: the call waited for its turn (its tenant's caps and rates) or a slot, holding none: why, and how long. */
  waited?: WaitTrace[];
}

/** F2, F3: what a call waited for between its attempts, in all. */
export interface WaitTrace {
  /** `turn`: its tenant's cap or rate (F3); `slot`: its node kept its last slots for other tenants (F2). */
  for: 'turn' | 'slot';
  /** Why, as the node said the last time: `acme's cap of 3 running calls (2nd in line)`. */
  why: string;
  /** How long, in all (ms, the workflow's clock). */
  ms: number;
  times: number;
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
  /**
   * Who gave it: from the inbox, the signed-in person's email (else their subject at the issuer); from the CLI,
   * `cli:<name>` — the operator's own word (`--by`, default the OS user).
   */
  by: string;
  /** When the job received it (ISO 8601). */
  at: string;
  reason?: string;
  /** A9: the identity the provider vouched for, when it came from the inbox. */
  identity?: AnswerIdentity;
}

/** A9: a signed-in person, as the identity provider vouched for them. */
export interface AnswerIdentity {
  issuer: string;
  subject: string;
  email?: string;
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

/** Search attributes oz0 registers itself and keeps up to date (T3). */
export const Oz0Status = defineSearchAttributeKey('Oz0Status', SearchAttributeType.KEYWORD);
export const Oz0Tenant = defineSearchAttributeKey('Oz0Tenant', SearchAttributeType.KEYWORD);
export const Oz0Tools = defineSearchAttributeKey('Oz0Tools', SearchAttributeType.KEYWORD_LIST);

/**
 * N3: the memo field in which a job keeps its calls that wait for a person (`WaitingCall[]`, sealed with its tenant's
 * key as all it carries), so that one visibility list of the waiting jobs shows every waiting call: no query per job.
 * Absent while none waits, and from jobs of an older oz0 (those are asked with `waitingCalls`).
 */
export const WAITING_MEMO = 'oz0.waiting';
/** N3: the marker of jobs that keep {@link WAITING_MEMO} (workflow versioning: a run that began waiting before never did). */
export const WAITING_MEMO_PATCH = 'oz0-waiting-memo';

/**
 * N6: what a job's run may write into its history that a node of the previous release could not run after it: the
 * markers of this release's changes (a waiting call's memo and webhook notice, a session handed on at a shutdown).
 * A run's level comes with its settings (`JobSettings.level`), from the node that begins the run: this one, or the
 * previous release's (0) where `upgrade.rollbackSafe` holds. A run an older node began carries none: 0, for its life.
 */
export const FEATURE_LEVEL = 1;

/** What a job carries into its next run when it continues as new (T2). */
export interface JobCarry {
  run: number;
  calls: number;
  sessions: number;
  /** Steps of the job not in `traceTail`. */
  omitted: number;
  /**
   * D3: the run's steps, whole (at most a run's thousand, answers as claims): the next run keeps their last hundred,
   * and its start in history holds them all for `oz0 job trace`. A run of an older oz0 handed on only the hundred.
   */
  traceTail: TraceStep[];
  sandboxQueues: string[];
}
