/**
 * What the two forms of MCP tasks (./task.ts) share: the task as the attempt keeps it, the call that follows one, and
 * how a task the server no longer knows is told. How a poll waits is the extension's (./task-extension.ts
 * `nextStatus`), which SEP-1686's polls share.
 */
import { ProtocolError } from '@modelcontextprotocol/client';
import type { CallProgressState } from '../model/schemas';
import type { ServerConnection } from './connection';

/** The task a call runs as, as the heartbeat keeps it. */
export type TaskState = NonNullable<CallProgressState['task']>;

/** A task as either form reports it: what the attempt keeps of it. */
export interface TaskSeen {
  taskId: string;
  status: TaskState['status'];
  statusMessage?: string;
}

/** The server no longer knows the task (it restarted, it is another connection's, or its ttl ran out). */
export class TaskGone extends Error {
  override name = 'TaskGone';
}

/**
 * What a failed `tasks/get` means: MCP answers an unknown task with invalid params (either form; the SDKs word it
 * "Task not found"), and that task is gone: TaskGone. Any other failure is itself.
 */
export function goneIfUnknown(err: unknown, taskId: string): unknown {
  return err instanceof ProtocolError && err.code === -32602 ? new TaskGone(`task ${taskId}: ${err.message}`) : err;
}

export const isTerminal = (status: TaskSeen['status']) =>
  status === 'completed' || status === 'failed' || status === 'cancelled';

export interface TaskCall {
  connection: ServerConnection;
  /** The `tools/call` params (name, arguments, `_meta`) of a call not made yet. */
  params: { name: string; arguments: Record<string, unknown>; _meta: Record<string, unknown> };
  /** The task an attempt before this one made: polled, never made again. */
  priorTask?: TaskState;
  /** How long the server should keep the task and its result (SEP-1686; under the extension the server says). */
  ttlMs: number;
  /** The attempt's stop: it cancels the request that is open (the protocol's cancel) and ends the polling. */
  signal: AbortSignal;
  /** Each request's own limit: never longer than what is left of the attempt. */
  timeoutMs: number;
  /** Called with the task when it is made or found, and at each status after. */
  onTask(task: TaskSeen): void;
}
