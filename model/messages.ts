/**
 * The messages the workflows define, as their clients send them: the job's queries and Updates (its status and trace,
 * a live session's calls, a person's answer to a waiting call), the policy workflow's (its state and its changes),
 * the signal that tells a job its policy changed, and the signatures clients start both workflows by. Pure: the
 * workflows set their handlers on these, and the client, the CLI and the node send them.
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import type { Answer, AnswerIdentity, JobCarry, JobStatus, JobTrace, ToolResult } from './job';
import type { Approval, Decision, PolicyInput, TenantState, WatchedQuestion } from './schemas';
import type { GiveInput, LimiterState, LimiterStatus, TakeRequest, TakeResult } from './limiter';
import type { Shares } from './shares';
import type { Origins } from './origins';

/** The job workflow, as a client starts it: `client.workflow.start<JobWorkflow>(JOB_WORKFLOW, …)` (workflows/job.ts). */
export type JobWorkflow = (input: unknown, carry?: JobCarry) => Promise<JobTrace>;
/** A tenant's policy workflow, as the node and the CLI start it (workflows/policy.ts). */
export type TenantPolicyWorkflow = (input: PolicyInput) => Promise<void>;
/** F3: a tenant's limiter, as a node starts it with its first ask (workflows/shares.ts). */
export type TenantSharesWorkflow = (input: SharesInput) => Promise<void>;

/** The limiter's input: its tenant, or the state a run before it carried over. */
export interface SharesInput {
  tenant: string;
  state?: LimiterState;
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
/** I14: the external session a node's gateway may open for a token: the one waiting or open now, and those ahead. */
export const externalSessionQuery = defineQuery<ExternalSessionState>('externalSession');
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
  /** A9: who signed in to answer, as the identity provider vouched (the inbox's answers); none from the CLI. */
  identity?: AnswerIdentity;
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

/** I14: a job's external sessions as a gateway sees them: digests of their agents' tokens, never a token. */
export interface ExternalSessionState {
  tenant: string;
  /** The external session waiting to be opened (`open: false`) or open now. */
  current?: { session: string; run: number; open: boolean; digest?: string };
  /** The token digests of the external sessions still ahead in the job. */
  ahead: string[];
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

export const policyStateQuery = defineQuery<TenantState>('state');
/** A13: the state and what of it a command set (the rest is its config seed's), in one read. */
export const policyOriginsQuery = defineQuery<{ state: TenantState; origins: Origins }>('origins');
export const setPolicyUpdate = defineUpdate<TenantState, [string, Decision]>('setPolicy');
export const killUpdate = defineUpdate<TenantState, [string]>('kill');
export const reviveUpdate = defineUpdate<TenantState, [string]>('revive');
export const approveUpdate = defineUpdate<TenantState, [string, Approval]>('approve');
export const revokeUpdate = defineUpdate<TenantState, [string]>('revoke');
/** A4: watch a call that waits for a person's yes; answers the state as of now (the node decides with it). */
export const watchQuestionUpdate = defineUpdate<TenantState, [WatchedQuestion]>('watchQuestion');
/** N4: the same for every question a node's calls asked since its last batch (common/update-batcher.ts): one Update. */
export const watchQuestionsUpdate = defineUpdate<TenantState, [WatchedQuestion[]]>('watchQuestions');
/** A4: the call's wait has ended (answered, timed out, withdrawn): nothing more to tell its job. */
export const forgetQuestionSignal = defineSignal<[{ jobId: string; key: string }]>('forgetQuestion');
/**
 * F1-F5: sets a tenant's share of the platform: weight, highest priority, caps and rates (`oz0 tenant set`). A13: the
 * fields its caller named are marked set by a command; without them (an older caller), the fields it changed.
 */
export const setSharesUpdate = defineUpdate<TenantState, [Shares, string[]?]>('setShares');

/** F3: a node asks its tenant's limiter for a call's permits; the call starts, or waits in line for its turn. */
export const takeUpdate = defineUpdate<TakeResult, [TakeRequest]>('take');
/**
 * N4: the asks a node's calls made since its last batch, in one Update (common/update-batcher.ts), answered in order; an
 * ask the limiter's checks refuse is answered `{ refused }`, the others as they would be alone.
 */
export const takeManyUpdate = defineUpdate<Array<TakeResult | { refused: string }>, [TakeRequest[]]>('takeMany');
/** F3: a node gives back permits (its calls ended) and renews the ones it keeps; answers the calls in line, by scope. */
export const giveUpdate = defineUpdate<Record<string, number>, [GiveInput]>('give');
/** F3: the same, from a node that stops: a signal, which needs no worker to answer it (the node may be the last). */
export const giveSignal = defineSignal<[GiveInput]>('giveBack');
/** F3: a call in line will not come for its turn (its job was cancelled, or the call ended otherwise). */
export const withdrawSignal = defineSignal<[{ jobId: string; key: string }]>('withdraw');
/** F3, C5: news of a tenant's kill switches (from a node that follows its policy): calls in line they cover look again. */
export const killsSignal = defineSignal<[{ kills: string[] }]>('kills');
/** F5: the limits a tenant's limiter holds calls to, once changed (`oz0 tenant set`): those in line may fit now. */
export const limitsSignal = defineSignal<[LimiterState['settings']]>('limits');
/** F5: what the limiter counts now: running and waiting calls by scope. */
export const limiterStatusQuery = defineQuery<LimiterStatus>('limiterStatus');

/**
 * F3: a job's call in line has its turn (its limiter holds a permit for it, `granted`), or should look again at once
 * (`recheck`: a kill switch covers its tool now).
 */
export const turnSignal = defineSignal<[Turn]>('turn');

export interface Turn {
  key: string;
  granted?: true;
  recheck?: string;
}
