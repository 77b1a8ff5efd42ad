/**
 * MCP tasks, in the two forms servers offer them. A call that becomes a task is made once and its result fetched
 * later: its id goes into the attempt's heartbeat, so a later attempt (after a time limit, or on another node after
 * this one was lost) polls the same task instead of calling again, whatever its function's hints.
 *
 * - SEP-1686, 2025-11-25's experimental tasks (./task-legacy.ts): a function whose listing says
 *   `execution.taskSupport` "required" or "optional", on a server that offers tasks for `tools/call`, is asked to run
 *   as a task; the attempt polls `tasks/get` and takes the result with `tasks/result`.
 * - SEP-2663, the `io.modelcontextprotocol/tasks` extension on 2026-07-28 (./task-extension.ts): every call to a
 *   server that declares the extension declares it too, and the server decides per request whether to answer with a
 *   task; the attempt polls `tasks/get`, whose answer carries the result.
 */
import type { Tool } from '@modelcontextprotocol/client';
import type { CallToolResult } from '@modelcontextprotocol/client';
import { MODERN_PROTOCOL } from '../model/protocol';
import type { ServerConnection } from './connection';
import { callMayBeTask, cancelExtensionTask, pollExtensionTask } from './task-extension';
import { cancelLegacyTask, runLegacyTask } from './task-legacy';
import { TaskGone } from './task-state';
import type { TaskCall, TaskState } from './task-state';

export { TaskGone };
export type { TaskCall, TaskSeen, TaskState } from './task-state';

export type TaskSupport = 'required' | 'optional' | 'forbidden';

/** What a 2025-11-25 listing says of tasks; none is "forbidden" (MCP's default). 2026-07-28 listings say nothing. */
export function taskSupportOf(tool: Pick<Tool, 'execution'>): TaskSupport {
  return tool.execution?.taskSupport ?? 'forbidden';
}

/**
 * What the attempt does with a function: a plain request; a SEP-1686 task; a request the server may answer with a
 * task (SEP-2663); or nothing, for a reason it says.
 */
export type TaskPlan = { as: 'request' } | { as: 'task' } | { as: 'may be task' } | { refused: string };

/**
 * A task the attempt before left is polled whatever the listing says now. On a server that takes tasks as the
 * extension, any call may become one. Else a function that requires or offers tasks runs as one when its server
 * offers SEP-1686 tasks for `tools/call`, and one that requires them on a server that does not is refused before
 * anything is sent.
 */
export function taskPlan(input: {
  support: TaskSupport;
  offered: boolean;
  extension: boolean;
  priorTask: boolean;
}): TaskPlan {
  if (input.priorTask) return { as: 'task' };
  if (input.extension) return { as: 'may be task' };
  if (input.support === 'forbidden') return { as: 'request' };
  if (input.offered) return { as: 'task' };
  if (input.support === 'optional') return { as: 'request' };
  return { refused: 'it must run as an MCP task, and the server does not offer tasks for tools/call' };
}

/** Whether the server offers tasks in either form: SEP-1686 for tools/call, or the extension. */
export function offersTasks(connection: ServerConnection): boolean {
  return connection.offersLegacyTasks || connection.offersTaskExtension;
}

/**
 * Makes the call (a SEP-1686 task, or a request the server may answer with a task), or finds the task an attempt
 * before made, follows it to its end, and returns its result.
 */
export function runTask(call: TaskCall): Promise<CallToolResult> {
  const { priorTask, connection } = call;
  const extension = priorTask ? priorTask.protocol === MODERN_PROTOCOL : connection.modern;
  if (extension !== connection.modern) {
    const spoken = connection.modern ? 'speaks 2026-07-28' : 'no longer speaks 2026-07-28';
    return Promise.reject(new TaskGone(`task ${priorTask?.id}: the server ${spoken}, and its tasks are another form`));
  }
  if (!extension) return runLegacyTask(call);
  return priorTask ? pollExtensionTask(call, priorTask.id) : callMayBeTask(call);
}

/** Cancels the task (`tasks/cancel`) for a call that ends here; bounded, and a refusal is no failure. */
export function cancelTask(connection: ServerConnection, task: TaskState): Promise<string> {
  return task.protocol === MODERN_PROTOCOL
    ? cancelExtensionTask(connection, task.id)
    : cancelLegacyTask(connection, task.id);
}
