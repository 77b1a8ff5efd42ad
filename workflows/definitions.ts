/**
 * What a job is, as the workflow, the node and the client all see it: the trace, queries, search-attribute keys,
 * failure types and what a call's activity takes and gives. Pure: the workflow bundle imports it. The spec's types
 * are inferred from its zod schema in common/schemas (imported as types only: zod stays out of the bundle).
 */
import { defineQuery } from '@temporalio/workflow';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import type { AttemptRecord, JobSpec } from '../common/schemas';

/** The workflow type name the client starts: `client.workflow.start('job', …)`. */
export const JOB_WORKFLOW = 'job';

/** Every tool a spec names, in first-use order. */
export function toolsOf(spec: JobSpec): string[] {
  const tools = new Set<string>();
  for (const step of spec.steps) {
    if ('call' in step) tools.add(step.call);
    else for (const call of step.session) tools.add(call.call);
  }
  return [...tools];
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
  /** For a call in a session: 1 for the session's first run, 2 for the fresh session after a lost node, … */
  sessionRun?: number;
}

/** `running` and `cancelling` while the workflow runs; the rest once it has decided how it ends. */
export type JobStatus = 'running' | 'cancelling' | 'completed' | 'cancelled';

export interface JobTrace {
  jobId: string;
  status: JobStatus;
  /** How many times the job continued as new so far (m in K2). */
  run: number;
  /** Calls made so far in the whole job. */
  calls: number;
  /** Steps left out of `steps` to keep the trace bounded across continues-as-new (T2). */
  omitted: number;
  steps: StepTrace[];
}

export const statusQuery = defineQuery<JobStatus>('status');
export const traceQuery = defineQuery<JobTrace>('trace');

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
} as const;

/** One call, as the workflow asks a node to make it. */
export interface CallInput {
  jobId: string;
  tenant: string;
  tool: string;
  args: Record<string, unknown>;
  key: string;
  session: string | null;
  timeoutSeconds: number;
  maxAttempts: number;
}

export interface CallOutput {
  result: ToolResult & { _meta?: Record<string, unknown> };
  attempts: AttemptRecord[];
  node: string;
  /** The node's own task queue, when this call left a sandboxed server running there. */
  sandboxQueue?: string;
}

/** What a node says when a harness session opens on it (T4). */
export interface SessionPlan {
  idempotent: Record<string, boolean>;
  mayRetry: Record<string, boolean>;
  node: { id: string; queue: string };
}

/** Per-tool settings the node resolves from its config for a job. */
export interface ToolSettings {
  timeoutSeconds: number;
  maxAttempts: number;
}

export interface JobSettings {
  tools: Record<string, ToolSettings>;
  continueAsNewAfterCalls: number;
  heartbeatTimeoutSeconds: number;
}

/** What a job carries into its next run when it continues as new (T2). */
export interface JobCarry {
  run: number;
  calls: number;
  sessions: number;
  omitted: number;
  traceTail: StepTrace[];
  sandboxQueues: string[];
}
