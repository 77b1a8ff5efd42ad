/**
 * SEP-2663, MCP tasks as the `io.modelcontextprotocol/tasks` extension of 2026-07-28. A server that declares it
 * decides per request whether a `tools/call` becomes a task, so every call to it declares the extension in its
 * client capabilities and takes whichever answer comes: a result (`resultType: "complete"`), a task
 * (`resultType: "task"`), or `input_required`. A task is polled with `tasks/get`, whose answer carries the result
 * (or the JSON-RPC error) once the task ends; `tasks/cancel` asks the server to stop it. There is no `tasks/result`
 * and no `tasks/list`.
 *
 * The extension lives here whole: the envelope that declares it on each request, the requests themselves (oz0's own
 * on the connection's transport, ServerConnection.ownRequest: the SDK's client refuses a task answer,
 * modelcontextprotocol/typescript-sdk#2637), the polling and the status notifications that cut its waits short, and
 * the parsing of every answer.
 */
import { ProtocolError } from '@modelcontextprotocol/client';
import type { CallToolResult } from '@modelcontextprotocol/client';
import { CallToolResultSchema, TaskStatusNotificationSchema } from '@modelcontextprotocol/core';
import { z } from 'zod';
import type { ServerConnection } from './connection';
import { AskedForInput, MISSING_REQUIRED_CLIENT_CAPABILITY, askedFor, missingCapabilities } from './asked';
import { TASKS_EXTENSION } from '../model/protocol';
import { goneIfUnknown, isTerminal } from './task-state';
import type { TaskCall } from './task-state';

/** A task as `tools/call` (`resultType: "task"`) and `tasks/get` answer it: the status, and what the status carries. */
const ExtensionTaskSchema = z.looseObject({
  taskId: z.string().min(1).max(1024),
  status: z.enum(['working', 'input_required', 'completed', 'failed', 'cancelled']),
  statusMessage: z.string().optional(),
  pollIntervalMs: z.number().nonnegative().optional(),
  ttlMs: z.number().nullable().optional(),
  /** `completed`: what the `tools/call` would have answered. */
  result: z.record(z.string(), z.unknown()).optional(),
  /** `failed`: the JSON-RPC error the `tools/call` would have answered. */
  error: z.looseObject({ code: z.number(), message: z.string(), data: z.unknown().optional() }).optional(),
  /** `input_required`: what the server asks of the client, keyed as it likes. */
  inputRequests: z.record(z.string(), z.unknown()).optional(),
});
type ExtensionTask = z.infer<typeof ExtensionTaskSchema>;

/**
 * The call, to a server that may answer it with a task: a result comes back as it is, a task is followed to its end,
 * `input_required` (or a `-32021` refusal) ends the call with what the server asked for.
 */
export async function callMayBeTask(call: TaskCall): Promise<CallToolResult> {
  const answer = await extensionRequest(call, 'tools/call', call.params);
  const kind = answer.resultType ?? 'complete';
  if (kind === 'input_required') throw new AskedForInput(askedFor(answer.inputRequests));
  if (kind === 'complete') return parseResult(answer, 'tools/call');
  if (kind !== 'task')
    throw new Error(`tools/call answered resultType ${JSON.stringify(kind)}, which oz0 does not know`);
  return followTask(call, parseTask(answer, 'tools/call'));
}

/** The task an attempt before made, polled to its end: never made again. */
export async function pollExtensionTask(call: TaskCall, taskId: string): Promise<CallToolResult> {
  return followTask(call, await getTask(call, taskId));
}

async function followTask(call: TaskCall, first: ExtensionTask): Promise<CallToolResult> {
  let task = first;
  call.onTask(task);
  while (!isTerminal(task.status)) {
    // Only a client that answers `tasks/update` can move it on: oz0 ends the call (and the attempt cancels the task).
    if (task.status === 'input_required') throw new AskedForInput(askedFor(task.inputRequests));
    await nextStatus(call.connection, task.taskId, task.pollIntervalMs, call.signal);
    task = await getTask(call, task.taskId);
    call.onTask(task);
  }
  if (task.status === 'completed') return parseResult(task.result ?? {}, `task ${task.taskId}`);
  const why = task.status === 'failed' && task.error ? `: ${task.error.message}` : '';
  const message = task.statusMessage ? ` (${task.statusMessage})` : '';
  return { isError: true, content: [{ type: 'text', text: `task ${task.taskId} ${task.status}${why}${message}` }] };
}

/**
 * Waits the task's poll interval (bounded), or less when the server says its status changed: a
 * `notifications/tasks/status` for this task, read off the connection before the SDK sees it. Both forms send that
 * notification alike, so SEP-1686's polls (./task-legacy.ts) wait here too.
 */
export function nextStatus(
  connection: ServerConnection,
  taskId: string,
  pollMs: number | undefined,
  signal: AbortSignal,
): Promise<void> {
  const ms = Math.min(Math.max(pollMs ?? 1000, 100), 5000);
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
    const unwatch = connection.watchNotifications('notifications/tasks/status', (message) => {
      const parsed = TaskStatusNotificationSchema.safeParse(message);
      if (!parsed.success || parsed.data.params.taskId !== taskId) return;
      done();
      resolve();
    });
    if (signal.aborted) stopped();
    else signal.addEventListener('abort', stopped, { once: true });
  });
}

async function getTask(call: TaskCall, taskId: string): Promise<ExtensionTask> {
  try {
    return parseTask(await extensionRequest(call, 'tasks/get', { taskId }), 'tasks/get');
  } catch (err) {
    throw goneIfUnknown(err, taskId);
  }
}

/** Each request of the extension declares it in its 2026-07-28 envelope's client capabilities. */
function declaring(connection: ServerConnection, params: Record<string, unknown>): Record<string, unknown> {
  const meta = (params._meta ?? {}) as Record<string, unknown>;
  return { ...params, _meta: { ...connection.envelope({ [TASKS_EXTENSION]: {} }), ...meta } };
}

/** One request of the extension; a `-32021` refusal is the server asking for what oz0 does not offer. */
async function extensionRequest(
  call: TaskCall,
  method: string,
  params: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  try {
    return await call.connection.ownRequest(method, declaring(call.connection, params), {
      signal: call.signal,
      timeoutMs: call.timeoutMs,
    });
  } catch (err) {
    if (err instanceof ProtocolError && err.code === MISSING_REQUIRED_CLIENT_CAPABILITY) {
      throw new AskedForInput(missingCapabilities(err.data), true);
    }
    throw err;
  }
}

function parseTask(answer: Record<string, unknown>, what: string): ExtensionTask {
  const parsed = ExtensionTaskSchema.safeParse(answer);
  if (!parsed.success) throw new Error(`${what} answered a task oz0 cannot read: ${parsed.error.issues[0]?.message}`);
  return parsed.data;
}

function parseResult(answer: Record<string, unknown>, what: string): CallToolResult {
  const { resultType: _kind, ...result } = answer;
  const parsed = CallToolResultSchema.safeParse(result);
  if (!parsed.success) throw new Error(`${what} answered a result oz0 cannot read: ${parsed.error.issues[0]?.message}`);
  return parsed.data as CallToolResult;
}

/** `tasks/cancel` for a call that ends here: an acknowledgement only; bounded, and a refusal is no failure. */
export async function cancelExtensionTask(connection: ServerConnection, taskId: string): Promise<string> {
  try {
    await connection.ownRequest('tasks/cancel', declaring(connection, { taskId }), {
      signal: new AbortController().signal,
      timeoutMs: 5000,
    });
    return `task ${taskId} cancelled`;
  } catch (err) {
    return `task ${taskId} not cancelled: ${(err as Error).message}`;
  }
}
