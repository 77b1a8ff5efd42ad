/**
 * Where a job's time goes between Temporal's tasks, read from its history (issue 36): each workflow task from
 * scheduled to started (the server's dispatch to a worker) and from started to completed (the worker's activation,
 * and its answer reaching the server), and each activity from scheduled to started (dispatch: near zero when the
 * server handed it over in its workflow task's answer, Temporal's eager dispatch) and from started to completed.
 * The same reading for oz0's jobs and the bare workflow, so what differs is plain.
 */
import type { Client } from '@temporalio/client';
import type { temporal } from '@temporalio/proto';
import { timestampMs } from '../common/time';
import type { Spread } from './common';

export type TaskPart = 'taskDispatch' | 'taskRun' | 'activityDispatch' | 'activityRun';

export type TaskParts = Record<TaskPart, number[]>;

export const noTaskParts = (): TaskParts => ({ taskDispatch: [], taskRun: [], activityDispatch: [], activityRun: [] });

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** Adds a workflow's task parts to `into`: each task and each activity of its history, in milliseconds. */
export async function addTaskParts(client: Client, workflowId: string, into: TaskParts): Promise<void> {
  taskPartsOf((await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [], into);
}

/** The same, from a history already read. */
export function taskPartsOf(events: HistoryEvent[], into: TaskParts): void {
  const at = new Map(events.map((e) => [String(e.eventId), timestampMs(e.eventTime)]));
  const since = (eventId: unknown, ms: number) => {
    const from = at.get(String(eventId));
    return from === undefined ? undefined : ms - from;
  };
  const add = (part: TaskPart, ms: number | undefined) => {
    if (ms !== undefined) into[part].push(ms);
  };
  for (const e of events) {
    const ms = timestampMs(e.eventTime);
    if (e.workflowTaskStartedEventAttributes)
      add('taskDispatch', since(e.workflowTaskStartedEventAttributes.scheduledEventId, ms));
    if (e.workflowTaskCompletedEventAttributes)
      add('taskRun', since(e.workflowTaskCompletedEventAttributes.startedEventId, ms));
    if (e.activityTaskStartedEventAttributes)
      add('activityDispatch', since(e.activityTaskStartedEventAttributes.scheduledEventId, ms));
    if (e.activityTaskCompletedEventAttributes)
      add('activityRun', since(e.activityTaskCompletedEventAttributes.startedEventId, ms));
  }
}

/** "task 1.8 + 5.5, activity 0.0 + 4.4 ms" (p50s: dispatch + run). */
export function describeTaskParts(s: Record<TaskPart, Spread>): string {
  const f = (v: Spread) => (v.n ? v.p50.toFixed(1) : '–');
  return `task ${f(s.taskDispatch)} + ${f(s.taskRun)}, activity ${f(s.activityDispatch)} + ${f(s.activityRun)} ms`;
}
