/**
 * How an attempt's request goes out, settled by prepare once it has read the listing and the policy (SPEC "Words",
 * P3-P6, T1): as an MCP task or a request, whether the call may be made again, and whether it resumes where an
 * attempt before got to. Pure; a request that must not go out at all is an {@link AttemptEnd}, nothing sent.
 */
import type { Tool } from '@modelcontextprotocol/client';
import { taskPlan, taskSupportOf } from '../../mcp';
import type { ServerConnection } from '../../mcp';
import { IDEMPOTENCY_KEY_META, RESUME_META, declaresResume } from '../../model/protocol';
import type { CallProgressState, ResumeRequest } from '../../model/schemas';
import { FailureType } from '../../model/activities';
import type { CallInput } from '../../model/activities';
import { AttemptEnd, StoppedBeforeSend } from './settle';
import { resumePlan } from './resume';
import { mayBeMadeAgain } from './verdicts';

export interface RequestPlan {
  /**
   * The call runs as an MCP task (mcp/task.ts): made now and followed, or the task an attempt before made, polled; or
   * its server takes tasks as the extension and may answer it with one.
   */
  asTask: boolean;
  /** SPEC "Words": this call may be made again. */
  again: boolean;
  /** The function only reads: a task of it that its server lost may be made anew. */
  readOnly: boolean;
  /** P3: `_meta["oz0/resume"]` for this request, when it goes on from an earlier attempt. */
  resume?: ResumeRequest;
  /** P3/P6: progress tokens are taken from this function (a remote one that declares resume). */
  takesTokens: boolean;
  /** P5: how this attempt starts (a task resumed, progress resumed, or started over and why), for its trace line. */
  notes: string[];
}

/**
 * This attempt's request: a task one of the attempts before made is polled; a call that may not be made twice is
 * not made again after an attempt that may have run; one that may is resumed where it got to, or started over.
 */
export function requestPlan(input: {
  call: Pick<CallInput, 'tool' | 'key'>;
  attempt: number;
  tool: Tool;
  connection: Pick<ServerConnection, 'kind' | 'offersLegacyTasks' | 'offersTaskExtension'>;
  /** A2: the tenant approved the server's current listing. */
  approved: boolean;
  prior: CallProgressState;
  /** A stop came while the attempt prepared: settle reads its cause. */
  stopped: boolean;
}): RequestPlan {
  const { call, attempt, tool, prior } = input;
  const { kind } = input.connection;
  const tasks = taskPlan({
    support: taskSupportOf(tool),
    offered: input.connection.offersLegacyTasks,
    extension: input.connection.offersTaskExtension,
    priorTask: prior.task !== undefined,
  });
  if ('refused' in tasks) {
    const why = `nothing was sent: ${call.tool} ${tasks.refused}`;
    throw new AttemptEnd('failed', why, { type: FailureType.attemptFailed, retryable: false });
  }
  if (input.stopped) throw new StoppedBeforeSend();
  const again = mayBeMadeAgain(tool, kind, input.approved);
  const notes: string[] = [];
  // A task the attempt before made is polled, not made again: that is safe whatever the function's hints.
  if (prior.task) notes.push(`resumed task ${prior.task.id}`);
  else if (attempt > 1 && !again && !(prior.unsent ?? []).includes(attempt - 1)) {
    const note = 'not made again: the attempt before may have run, and this function may not be made twice';
    const message = `${call.tool} (key ${call.key}) may have run: not made again`;
    throw new AttemptEnd('lost', note, { type: FailureType.mayHaveRun, retryable: false, message });
  }
  const resumes = declaresResume(tool);
  const plan = again && !prior.task ? resumePlan({ attempt, kind, declaresResume: resumes, prior }) : {};
  if (plan.note) notes.push(plan.note);
  return {
    asTask: tasks.as === 'task' || tasks.as === 'may be task',
    again,
    readOnly: tool.annotations?.readOnlyHint === true,
    resume: plan.meta,
    takesTokens: kind === 'remote' && resumes,
    notes,
  };
}

/** The `tools/call` request: the function, its arguments, and `_meta` with the call's key (K1) and its resume (P3). */
export function requestOf(
  p: { fn: string; resume?: ResumeRequest },
  input: CallInput,
  meta: Record<string, unknown>,
): { name: string; arguments: Record<string, unknown>; _meta: Record<string, unknown> } {
  const resume = p.resume ? { [RESUME_META]: p.resume } : {};
  return { name: p.fn, arguments: input.args, _meta: { ...meta, [IDEMPOTENCY_KEY_META]: input.key, ...resume } };
}
