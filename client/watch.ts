/**
 * `oz0 job watch`: the job's running calls, live — progress bars with attempt numbers and busy waits —
 * read from Temporal's pending activities and their heartbeats, until the job ends.
 */
import cliProgress from 'cli-progress';
import type { Client } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { decodeOptionalFailureToOptionalError } from '@temporalio/common/lib/internal-non-workflow';
import type { temporal } from '@temporalio/proto';
import { openedWith } from '../data';
import { callsOf, isSessionTrace } from '../model/job';
import { traceQuery, waitingCallsQuery } from '../model/messages';
import type { WaitingCall } from '../model/messages';
import { jobStatus } from './jobs';
import { timestampMs } from '../common/time';
import type { Timestamp } from '../common/time';
import type { CallProgressState } from '../model/schemas';

export interface WatchedCall {
  activityId: string;
  tool?: string;
  key?: string;
  attempt: number;
  /** `running`, or `waiting` for its next attempt (a busy wait or a backoff) with the time it is due. */
  state: 'running' | 'waiting' | 'cancelling';
  progress?: number;
  total?: number;
  nextAttemptAt?: string;
  lastFailure?: string;
}

/** A live session as the watch shows it: what it runs, its run and node, its calls so far. */
export interface WatchedSession {
  session: string;
  kind: 'harness' | 'external';
  harness?: string;
  status: string;
  run?: number;
  node?: string;
  calls: number;
  running: number;
}

export interface WatchSnapshot {
  jobId: string;
  status: string;
  calls: WatchedCall[];
  /** H9/point 9: the job's live sessions, their calls appearing as they are made. */
  sessions: WatchedSession[];
  /** A4: its calls that wait for a person's yes, oldest first. */
  questions: WaitingCall[];
}

/** A call's heartbeat: its progress as the node keeps it (P1), opened with the client's keys (D4). */
async function details(
  client: Client,
  jobId: string,
  payloads: temporal.api.common.v1.IPayloads | null | undefined,
): Promise<CallProgressState | undefined> {
  const first = payloads?.payloads?.[0];
  if (!first) return undefined;
  try {
    const context = { type: 'workflow' as const, namespace: client.options.namespace, workflowId: jobId };
    const [opened] = await openedWith(client.options.loadedDataConverter, [first], context);
    return defaultPayloadConverter.fromPayload(opened!) as CallProgressState;
  } catch {
    return undefined;
  }
}

/** The message of an activity's last failure, opened with the client's keys (D4: a failure's message is sealed). */
async function failureText(
  client: Client,
  jobId: string,
  failure: temporal.api.failure.v1.IFailure | null | undefined,
): Promise<string | undefined> {
  if (!failure) return undefined;
  const context = { type: 'workflow' as const, namespace: client.options.namespace, workflowId: jobId };
  const error = await decodeOptionalFailureToOptionalError(client.options.loadedDataConverter, failure, context).catch(
    (err: Error) => new Error(`a failure this process cannot open (${err.message})`),
  );
  return error?.message || undefined;
}

function toDate(ts: Timestamp): string | undefined {
  if (!ts?.seconds) return undefined;
  return new Date(Math.round(timestampMs(ts))).toISOString();
}

/** One look at the job: its status and every running call. */
export async function snapshot(client: Client, jobId: string): Promise<WatchSnapshot> {
  const handle = client.workflow.getHandle(jobId);
  const [description, status, trace, questions] = await Promise.all([
    handle.describe(),
    jobStatus(client, jobId),
    // The trace names calls whose heartbeat has not said yet, and holds the live sessions; a closed job has none.
    handle.query(traceQuery).catch(() => undefined),
    // A waiting call has no activity yet: the job itself says it waits (a job of an older oz0 has no such query).
    handle.query(waitingCallsQuery).catch((): WaitingCall[] => []),
  ]);
  const steps = trace ? callsOf(trace).filter((s) => s.running) : [];
  const pending = description.raw.pendingActivities ?? [];
  const opened = await Promise.all(
    pending.map(async (a) => ({
      beat: await details(client, jobId, a.heartbeatDetails),
      lastFailure: await failureText(client, jobId, a.lastFailure),
    })),
  );
  const calls = pending
    .map((a, i) => ({ a, ...opened[i]! }))
    .filter(({ a }) => a.activityType?.name === 'callTool')
    .map(({ a, beat, lastFailure }): WatchedCall => {
      const step = steps.find((s) => s.activityId === a.activityId);
      const d = { tool: step?.tool, key: step?.key || undefined, ...beat };
      const waiting = !!a.nextAttemptScheduleTime && !a.lastStartedTime;
      return {
        activityId: a.activityId ?? '',
        ...(d?.tool ? { tool: d.tool } : {}),
        ...(d?.key ? { key: d.key } : {}),
        attempt: a.attempt ?? 1,
        // Temporal's PendingActivityState: 1 scheduled, 2 started, 3 cancel requested.
        state: a.state === 3 ? 'cancelling' : waiting || a.state === 1 ? 'waiting' : 'running',
        ...(d?.progress !== undefined ? { progress: d.progress } : {}),
        ...(d?.total !== undefined ? { total: d.total } : {}),
        ...(waiting ? { nextAttemptAt: toDate(a.nextAttemptScheduleTime) } : {}),
        ...(lastFailure ? { lastFailure } : {}),
      };
    });
  const sessions = (trace?.steps ?? []).filter(isSessionTrace).map(
    (s): WatchedSession => ({
      session: s.session,
      kind: s.kind,
      ...(s.harness ? { harness: s.harness } : {}),
      status: s.status,
      ...(s.runs.length ? { run: s.runs.at(-1)!.run, node: s.runs.at(-1)!.node } : {}),
      calls: s.calls.length + s.omitted,
      running: s.calls.filter((c) => c.running).length,
    }),
  );
  return { jobId, status, calls, sessions, questions };
}

/** A4: a waiting call as the watch says it: what waits, since when, and the command that answers it. */
export function questionLabel(jobId: string, q: WaitingCall, now = Date.now()): string {
  const waited = Math.max(0, Math.round((now - Date.parse(q.askedAt)) / 1000));
  return `${q.activityId} ${q.tool} waits for a person's yes (${waited} s): ${q.args.slice(0, 80)} — oz0 call approve ${jobId} ${q.activityId}`;
}

function sessionLabel(s: WatchedSession): string {
  const what = s.kind === 'harness' ? `harness ${s.harness}` : 'external client';
  const where = s.run ? ` run ${s.run}${s.node ? ` on ${s.node}` : ''}` : '';
  return `session ${s.session} (${what}) ${s.status}${where}: ${s.calls} calls, ${s.running} running`;
}

function done(status: string): boolean {
  return !['running', 'waiting', 'cancelling'].includes(status);
}

function label(call: WatchedCall): string {
  const what = `${call.tool ?? call.activityId} attempt ${call.attempt}`;
  if (call.state === 'waiting') {
    const due = call.nextAttemptAt ? Math.max(0, Math.round((Date.parse(call.nextAttemptAt) - Date.now()) / 1000)) : 0;
    return `${what}: waiting ${due} s (${call.lastFailure ?? 'backoff'})`.slice(0, 110);
  }
  return call.state === 'cancelling' ? `${what}: cancelling` : what;
}

/**
 * Watches until the job ends; returns its final status. `json` prints one snapshot per line when something
 * changed; a terminal gets progress bars; anything else gets a line per change.
 */
export async function watchJob(
  client: Client,
  jobId: string,
  opts: { json?: boolean; intervalMs?: number; out?: NodeJS.WriteStream } = {},
): Promise<string> {
  const out = opts.out ?? process.stdout;
  const bars =
    !opts.json && out.isTTY
      ? new cliProgress.MultiBar(
          { format: ' {bar} {value}/{total} {label}', hideCursor: true, clearOnComplete: false, stream: out },
          cliProgress.Presets.shades_classic,
        )
      : undefined;
  const shown = new Map<string, cliProgress.SingleBar>();
  let last = '';
  let lastSessions = '';
  let lastQuestions = '';
  try {
    for (;;) {
      const now = await snapshot(client, jobId);
      const text = JSON.stringify(now);
      if (bars) {
        // A live session's line is said above the bars when it changes (its calls appear as they are made).
        const sessionsText = now.sessions.map(sessionLabel).join('\n');
        // MultiBar prints its log when it redraws its bars: with none yet, a line goes straight out.
        const say = (text: string) => (shown.size ? bars.log(`${text}\n`) : out.write(`${text}\n`));
        if (sessionsText && sessionsText !== lastSessions) say(sessionsText);
        lastSessions = sessionsText;
        // A4: a question is said above the bars when it is asked (a waiting call has no bar: nothing runs yet).
        const questionsText = now.questions.map((q) => questionLabel(jobId, q)).join('\n');
        const asked = now.questions.map((q) => q.key).join();
        if (questionsText && asked !== lastQuestions) say(questionsText);
        lastQuestions = asked;
        for (const call of now.calls) {
          const bar = shown.get(call.activityId) ?? bars.create(call.total ?? 1, 0, { label: '' });
          shown.set(call.activityId, bar);
          bar.setTotal(call.total ?? Math.max(1, call.progress ?? 1));
          bar.update(call.progress ?? 0, { label: label(call) });
        }
        for (const [id, bar] of shown) {
          if (!now.calls.some((c) => c.activityId === id)) {
            bar.update(bar.getTotal(), { label: `${id} done` });
            bar.stop();
            shown.delete(id);
          }
        }
      } else if (text !== last) {
        const sessions = now.sessions.filter((s) => s.status !== 'ended').map(sessionLabel);
        const questions = now.questions.map((q) => questionLabel(jobId, q));
        const calls = now.calls.map((c) => `${label(c)} ${c.progress ?? 0}/${c.total ?? '?'}`);
        out.write(
          opts.json
            ? `${text}\n`
            : `${now.status}: ${[...sessions, ...questions, ...calls].join(', ') || 'no running calls'}\n`,
        );
      }
      last = text;
      if (done(now.status)) return now.status;
      await new Promise((r) => setTimeout(r, opts.intervalMs ?? 500));
    }
  } finally {
    bars?.stop();
  }
}
