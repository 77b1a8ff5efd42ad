/**
 * SEP-1686, the experimental tasks of 2025-11-25 (the reference "everything" server's, and TypeScript SDK 1.x's):
 * the `tools/call` carries `task` and answers at once with the task; the attempt polls `tasks/get` (woken early by
 * `notifications/tasks/status`, as the extension's polls are: ./task-extension.ts `nextStatus`) until the task ends,
 * and takes its result with `tasks/result`. The v2 client has these methods as wire vocabulary only, so each request
 * names its result schema.
 *
 * Every request of a task takes the attempt's one signal: @modelcontextprotocol/client 2.4.0 removes the abort
 * listener a request adds when the request settles (1.x never did, and a long task's polls grew listeners on it).
 */
import { ProtocolError } from '@modelcontextprotocol/client';
import type { CallToolResult, RequestOptions } from '@modelcontextprotocol/client';
import {
  CallToolResultSchema,
  CancelTaskResultSchema,
  CreateTaskResultSchema,
  GetTaskResultSchema,
} from '@modelcontextprotocol/core';
import type { ServerConnection } from './connection';
import { nextStatus } from './task-extension';
import { goneIfUnknown, isTerminal } from './task-state';
import type { TaskCall, TaskSeen } from './task-state';

type LegacyTask = TaskSeen & { pollInterval?: number };

/** Makes (or finds) the task, follows it to its end, and returns its result. */
export async function runLegacyTask(call: TaskCall): Promise<CallToolResult> {
  const { connection, signal, timeoutMs } = call;
  const options: RequestOptions = { signal, timeout: timeoutMs, maxTotalTimeout: timeoutMs };
  let task: LegacyTask = call.priorTask
    ? await getTask(connection, call.priorTask.id, options)
    : (
        await connection.client.request(
          { method: 'tools/call', params: { ...call.params, task: { ttl: call.ttlMs } } },
          CreateTaskResultSchema,
          options,
        )
      ).task;
  call.onTask(task);
  while (!isTerminal(task.status)) {
    // The server waits on the client (an elicitation or a sampling oz0 does not offer): tasks/result delivers its
    // request, which the client refuses, and then blocks until the task ends.
    if (task.status === 'input_required') return taskResult(connection, task, options);
    await nextStatus(connection, task.taskId, task.pollInterval, signal);
    task = await getTask(connection, task.taskId, options);
    call.onTask(task);
  }
  return taskResult(connection, task, options);
}

async function getTask(connection: ServerConnection, taskId: string, options: RequestOptions): Promise<LegacyTask> {
  try {
    const task = await connection.client.request(
      { method: 'tasks/get', params: { taskId } },
      GetTaskResultSchema,
      options,
    );
    return { ...task, pollInterval: task.pollInterval ?? undefined, statusMessage: task.statusMessage ?? undefined };
  } catch (err) {
    throw goneIfUnknown(err, taskId);
  }
}

/** The result of an ended task: its CallToolResult, or an error result that says how it ended without one. */
async function taskResult(
  connection: ServerConnection,
  task: LegacyTask,
  options: RequestOptions,
): Promise<CallToolResult> {
  try {
    return await connection.client.request(
      { method: 'tasks/result', params: { taskId: task.taskId } },
      CallToolResultSchema,
      options,
    );
  } catch (err) {
    if (task.status === 'completed' || !(err instanceof ProtocolError)) throw err;
    const why = task.statusMessage ? `: ${task.statusMessage}` : '';
    return { isError: true, content: [{ type: 'text', text: `task ${task.taskId} ${task.status}${why}` }] };
  }
}

/** `tasks/cancel` for a call that ends here; bounded, and a refusal (the task ended already) is no failure. */
export async function cancelLegacyTask(connection: ServerConnection, taskId: string): Promise<string> {
  try {
    const task = await connection.client.request(
      { method: 'tasks/cancel', params: { taskId } },
      CancelTaskResultSchema,
      { timeout: 5000 },
    );
    return `task ${taskId} cancelled (${task.status})`;
  } catch (err) {
    return `task ${taskId} not cancelled: ${(err as Error).message}`;
  }
}
