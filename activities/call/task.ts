/**
 * MCP tasks (SEP-1686, as the client of @modelcontextprotocol/sdk 1.32.2 has them): a function whose listing says
 * `execution.taskSupport` "required" or "optional", on a server that offers tasks for `tools/call`, is called now and
 * its result fetched later. The `tools/call` answers at once with a task; the attempt then polls `tasks/get` (woken
 * early by `notifications/tasks/status`) until the task ends, and takes its result with `tasks/result`.
 *
 * The task's id goes into the attempt's heartbeat, so a later attempt (after a time limit, or on another node after
 * this one was lost) polls the same task instead of calling again: a task is made once, whatever its function's hints.
 */
import { CallToolResultSchema, CreateTaskResultSchema, McpError } from '@modelcontextprotocol/sdk/types.js';
import type { CallToolResult, Task, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { RequestOptions } from '@modelcontextprotocol/sdk/shared/protocol.js';
import type { ServerConnection } from '../servers/connection';

export type TaskSupport = 'required' | 'optional' | 'forbidden';

/** What a function's listing says of tasks; none is "forbidden" (MCP's default). */
export function taskSupportOf(tool: Pick<Tool, 'execution'>): TaskSupport {
  return tool.execution?.taskSupport ?? 'forbidden';
}

/** What the attempt does with a function: a plain request, a task, or nothing, for a reason it says. */
export type TaskPlan = { as: 'request' } | { as: 'task' } | { refused: string };

/**
 * A function that requires or offers tasks runs as one when its server offers tasks for `tools/call`; one that
 * requires them on a server that does not is refused before anything is sent. A task the attempt before left is
 * polled whatever the listing says now.
 */
export function taskPlan(input: { support: TaskSupport; offered: boolean; priorTask: boolean }): TaskPlan {
  if (input.priorTask) return { as: 'task' };
  if (input.support === 'forbidden') return { as: 'request' };
  if (input.offered) return { as: 'task' };
  if (input.support === 'optional') return { as: 'request' };
  return { refused: 'it must run as an MCP task, and the server does not offer tasks for tools/call' };
}

/** Whether the server said, at initialize, that it takes `tools/call` as a task. */
export function offersTasks(connection: ServerConnection): boolean {
  return connection.client.getServerCapabilities()?.tasks?.requests?.tools?.call !== undefined;
}

/** The server no longer knows the task (it restarted, it is another session's, or its ttl ran out). */
export class TaskGone extends Error {
  override name = 'TaskGone';
}

const isTerminal = (status: Task['status']) => status === 'completed' || status === 'failed' || status === 'cancelled';

export interface TaskCall {
  connection: ServerConnection;
  /** The `tools/call` params (name, arguments, `_meta`) of a task not made yet. */
  params: { name: string; arguments: Record<string, unknown>; _meta: Record<string, unknown> };
  /** The task an attempt before this one made: polled, never made again. */
  priorTaskId?: string;
  /** How long the server should keep the task and its result. */
  ttlMs: number;
  /** The attempt's stop: it cancels the request that is open (notifications/cancelled) and ends the polling. */
  signal: AbortSignal;
  /** Each request's own limit: never longer than what is left of the attempt. */
  timeoutMs: number;
  /** Called with the task when it is made or found, and at each status after. */
  onTask(task: Task): void;
}

/** Makes (or finds) the task, follows it to its end, and returns its result. */
export async function runTask(call: TaskCall): Promise<CallToolResult> {
  const { connection, signal, timeoutMs } = call;
  // Each request its own signal: the SDK never removes the abort listener it adds, and a long task polls often.
  const requested = <T>(fn: (options: RequestOptions) => Promise<T>) =>
    ownSignal(signal, (own) => fn({ signal: own, timeout: timeoutMs, maxTotalTimeout: timeoutMs }));
  let task = call.priorTaskId
    ? await requested((options) => getTask(connection, call.priorTaskId!, options))
    : (
        await requested((options) =>
          connection.client.request({ method: 'tools/call', params: call.params }, CreateTaskResultSchema, {
            ...options,
            task: { ttl: call.ttlMs },
          }),
        )
      ).task;
  call.onTask(task);
  while (!isTerminal(task.status)) {
    // The server waits on the client (an elicitation or a sampling oz0 does not offer): tasks/result delivers its
    // request, which the client refuses, and then blocks until the task ends.
    if (task.status === 'input_required') return requested((options) => taskResult(connection, task, options));
    await nextStatus(connection, task, signal);
    const { taskId } = task;
    task = await requested((options) => getTask(connection, taskId, options));
    call.onTask(task);
  }
  const ended = task;
  return requested((options) => taskResult(connection, ended, options));
}

/** Runs fn with a signal of its own that follows `signal`, and lets go of `signal` when fn settles. */
async function ownSignal<T>(signal: AbortSignal, fn: (own: AbortSignal) => Promise<T>): Promise<T> {
  const own = new AbortController();
  const follow = () => own.abort(signal.reason);
  if (signal.aborted) follow();
  else signal.addEventListener('abort', follow, { once: true });
  try {
    return await fn(own.signal);
  } finally {
    signal.removeEventListener('abort', follow);
  }
}

async function getTask(connection: ServerConnection, taskId: string, options: RequestOptions): Promise<Task> {
  try {
    return await connection.client.experimental.tasks.getTask(taskId, options);
  } catch (err) {
    // MCP says an unknown task is an invalid-params error; the SDK's servers word it "Task not found".
    if (err instanceof McpError && err.code === -32602) throw new TaskGone(`task ${taskId}: ${err.message}`);
    throw err;
  }
}

/** The result of an ended task: its CallToolResult, or an error result that says how it ended without one. */
async function taskResult(connection: ServerConnection, task: Task, options: RequestOptions): Promise<CallToolResult> {
  try {
    return await connection.client.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema, options);
  } catch (err) {
    if (task.status === 'completed' || !(err instanceof McpError)) throw err;
    const why = task.statusMessage ? `: ${task.statusMessage}` : '';
    return { isError: true, content: [{ type: 'text', text: `task ${task.taskId} ${task.status}${why}` }] };
  }
}

/** Waits the task's poll interval (bounded), or less when the server says its status changed. */
function nextStatus(connection: ServerConnection, task: Task, signal: AbortSignal): Promise<void> {
  const ms = Math.min(Math.max(task.pollInterval ?? 1000, 100), 5000);
  return new Promise((resolve, reject) => {
    const done = () => {
      clearTimeout(timer);
      unwatch();
      signal.removeEventListener('abort', stopped);
    };
    const stopped = () => {
      done();
      reject(signal.reason instanceof Error ? signal.reason : new Error(String(signal.reason)));
    };
    const timer = setTimeout(() => (done(), resolve()), ms);
    const unwatch = connection.watchTask(task.taskId, () => (done(), resolve()));
    if (signal.aborted) stopped();
    else signal.addEventListener('abort', stopped, { once: true });
  });
}

/** `tasks/cancel` for a call that ends here; bounded, and a refusal (the task ended already) is no failure. */
export async function cancelTask(connection: ServerConnection, taskId: string): Promise<string> {
  try {
    const task = await connection.client.experimental.tasks.cancelTask(taskId, { timeout: 5000 });
    return `task ${taskId} cancelled (${task.status})`;
  } catch (err) {
    return `task ${taskId} not cancelled: ${(err as Error).message}`;
  }
}
