/**
 * `oz0 job watch`: the job's running calls, live — progress bars with attempt numbers and busy waits —
 * read from Temporal's pending activities and their heartbeats, until the job ends.
 */
import cliProgress from 'cli-progress';
import type { Client } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import type { temporal } from '@temporalio/proto';
import { jobStatus } from './jobs';
import type { CallProgressState } from '../common/schemas';

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

export interface WatchSnapshot {
  jobId: string;
  status: string;
  calls: WatchedCall[];
}

function details(payloads: temporal.api.common.v1.IPayloads | null | undefined): CallProgressState | undefined {
  const first = payloads?.payloads?.[0];
  if (!first) return undefined;
  try {
    return defaultPayloadConverter.fromPayload(first) as CallProgressState;
  } catch {
    return undefined;
  }
}

function toDate(ts: { seconds?: unknown; nanos?: number | null } | null | undefined): string | undefined {
  if (!ts?.seconds) return undefined;
  return new Date(Number(ts.seconds) * 1000 + Math.round((ts.nanos ?? 0) / 1e6)).toISOString();
}

/** One look at the job: its status and every running call. */
export async function snapshot(client: Client, jobId: string): Promise<WatchSnapshot> {
  const handle = client.workflow.getHandle(jobId);
  const [description, status] = await Promise.all([handle.describe(), jobStatus(client, jobId)]);
  const pending = description.raw.pendingActivities ?? [];
  const calls = pending
    .filter((a) => a.activityType?.name === 'callTool')
    .map((a): WatchedCall => {
      const d = details(a.heartbeatDetails);
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
        ...(a.lastFailure?.message ? { lastFailure: a.lastFailure.message } : {}),
      };
    });
  return { jobId, status, calls };
}

function done(status: string): boolean {
  return !['running', 'cancelling'].includes(status);
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
  try {
    for (;;) {
      const now = await snapshot(client, jobId);
      const text = JSON.stringify(now);
      if (bars) {
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
        out.write(
          opts.json
            ? `${text}\n`
            : `${now.status}: ${now.calls.map((c) => `${label(c)} ${c.progress ?? 0}/${c.total ?? '?'}`).join(', ') || 'no running calls'}\n`,
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
