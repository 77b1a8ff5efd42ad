/**
 * What a job asks of a node: the activities the workflows call, what each takes and gives, and the failure types
 * they raise. The workflows type their calls against {@link Activities} (activities/index.ts builds them), so nothing
 * of the node's code reaches the workflow bundle. Pure.
 */
import type { Priority } from '@temporalio/common';
import type { AttemptRecord, CallProgressState } from './schemas';
import type { AnswerIdentity, ToolResult } from './job';

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
  confirmed?: { key: string; by: string; at: string; identity?: AnswerIdentity };
  /** A6: how long its question may wait, so its policy workflow can forget one never said to have ended. */
  confirmTimeoutSeconds?: number;
  /** F4: the priority it was scheduled with (its place in its tenant's line, F3); none: the default, 3. */
  priority?: number;
  /** F3: its turn came in its tenant's line: its limiter holds a permit for it, which the node claims. */
  granted?: true;
  /**
   * F2, F3: the call waited between attempts (its activity scheduled anew): the attempts made before, and the state
   * they left, which a first attempt of the new activity carries on as Temporal's heartbeat would.
   */
  before?: { attempts: number; state: CallProgressState };
}

/**
 * F2, F3: the call may not go on now: it gave its slot back and sent nothing, and its job waits without holding a
 * slot or using an attempt: for its turn in its tenant's line (`turn`, signalled by its limiter), or a moment
 * (`slot`: the node keeps its last slots for tenants under their share), then schedules it again.
 */
export interface CallWaits {
  waits: { for: 'turn' | 'slot'; why: string; retryInMs?: number };
  /** The attempts made before the wait, and the state they left (for the next one). */
  attempts: number;
  state: CallProgressState;
  node: string;
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
  /** N5: `sessionQueue`, where the session's lease (or harness) runs; an older node names none (its own queue). */
  node: { id: string; queue: string; sessionQueue?: string };
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
  /** N6: the release whose markers the run may write (model/job.ts FEATURE_LEVEL); absent: the previous release's. */
  level?: number;
}

/** The node's activities (activities/index.ts `createActivities`), as the workflows call them. */
export interface Activities {
  /**
   * One attempt of one call (T1); or, for a call that waits for a person's yes, the question (A4); or, for one that
   * may not go on now, what it waits for (F2, F3).
   */
  callTool(input: CallInput): Promise<CallOutput | CallAsks | CallWaits>;
  /** Checks a job's input against the spec's schema and resolves the settings of the tools it names; or why not. */
  resolveJobSettings(input: unknown, priority?: Priority): Promise<JobSettings | { badSpec: string }>;
  /** Opens a session on the node (T4), or describes a live session's new tool: hints, settings, the node's queue. */
  /** `opening`: a session opens on the node that answers (N5: one that holds its most sessions refuses, retryably). */
  describeTools(jobId: string, tenant: string, tools: string[], opening?: boolean): Promise<SessionPlan>;
  /** Holds a session's place on the node: it heartbeats until cancelled (T4). */
  holdSession(): Promise<void>;
  /** H2, H7: runs a harness on the node until it exits. */
  runHarness(input: HarnessInput): Promise<HarnessOutcome>;
  /** H5: stops a live session's running call on the node; false when none runs there. */
  stopCall(jobId: string, callId: string, why: string): Promise<boolean>;
  /** The start probe's activity (worker/cancel-way.ts): waits for a cancel the server pushes. */
  awaitPushedCancel(waitMs: number): Promise<void>;
  /** Stops a job's sandboxed servers on the node (the tenant's: two tenants may use one job id); on its own queue. */
  stopSandboxes(jobId: string, tenant: string): Promise<number>;
  /** A10: tells the tenant's webhook that a call started waiting for a person, or how its wait ended. */
  noticeApprovers(notice: ApprovalNotice): Promise<'sent' | 'none'>;
}

/** A10: what a tenant's webhook is told of a call that waits for a person: never its arguments, never a reason. */
export interface ApprovalNotice {
  event: 'waiting' | 'approved' | 'denied' | 'timed out' | 'withdrawn';
  tenant: string;
  jobId: string;
  tool: string;
  /** The call's activity id (`c3`) and key. */
  call: string;
  key: string;
  /** `waiting`: until when it may wait (ISO 8601). */
  until?: string;
  /** `approved`, `denied`: who answered. */
  by?: string;
  /** `timed out`, `withdrawn`: how its wait ended, in words. */
  ended?: string;
}
