/**
 * (c) Cancel-to-notification latency, stdio and Streamable HTTP, and (d) kill-switch fan-out: one switch for
 * every tenant while `calls` calls run. Both clocks are this machine's: from the cancel request (or the switch)
 * to the server writing down that it received notifications/cancelled. Each cancel says which way stopped its call:
 * the node's follow of the job's history (issue 36.4: the server heard the cancel before the job's history recorded
 * its activity's cancel, which the node cannot have had by then) or the job's workflow task (Temporal's own way).
 * Both servers are processes of their own
 * (the HTTP one as a remote server would be), and their log is followed, not read whole, so the measure itself
 * adds little to the time it measures.
 */
import path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import { approveListing, readListing } from '../../client/approve';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import { timestampMs } from '../../common/time';
import { tailReceived } from '../../examples/common';
import { killUpdate, reviveUpdate } from '../../model/messages';
import { fixed, spread, spreads, until } from '../common';
import type { Row } from '../common';
import { benchConfig, echoSteps, withNode } from '../env';
import type { BenchEnv } from '../env';
import { startHttpExample } from '../../worker/processes';
import type { JobFollowCounts } from '../../activities/call/job-follows';

export interface CancelOptions {
  cancels: number;
  /** Jobs cancelled at once (the target's figure is for 10). */
  batch: number;
  /** The calls of the long job whose history a follow's first read pages through. */
  longCalls: number;
  calls: number;
  tenants: number;
}

/**
 * When Temporal recorded the job's cancel request, the workflow task that followed it (scheduled, started: handed
 * to a node's poller, completed: the node's answer) and its call activity's cancel, in ms since the epoch.
 */
async function cancelEvents(handle: WorkflowHandle) {
  const events = (await handle.fetchHistory()).events ?? [];
  const at = (e: (typeof events)[number] | undefined) => timestampMs(e?.eventTime);
  const requested = events.findIndex((e) => e.workflowExecutionCancelRequestedEventAttributes);
  const after = events.slice(requested + 1);
  return {
    requested: at(events[requested]),
    scheduled: at(after.find((e) => e.workflowTaskScheduledEventAttributes)),
    started: at(after.find((e) => e.workflowTaskStartedEventAttributes)),
    completed: at(after.find((e) => e.workflowTaskCompletedEventAttributes)),
    activity: at(after.find((e) => e.activityTaskCancelRequestedEventAttributes)),
  };
}

/**
 * What a node's first read of a long job's history costs (issue 36.4): a run of `calls` echo calls (a run holds up to
 * `jobs.continueAsNewAfterCalls`, 1000 by default, before it continues as new), read from its first event the way a
 * follow reads it (activities/call/job-follows.ts), ten times.
 */
async function measureFirstRead(env: BenchEnv, taskQueue: string, calls: number) {
  const job = await env.client.workflow.start('job', {
    taskQueue,
    workflowId: env.id('cancel-long'),
    args: [{ tenant: 'bench', steps: echoSteps(calls) }],
  });
  await job.result();
  const execution = { workflowId: job.workflowId, runId: job.firstExecutionRunId };
  const times: number[] = [];
  let pages = 0;
  let events = 0;
  let bytes = 0;
  for (let i = 0; i < 10; i++) {
    const t = performance.now();
    let token: Uint8Array | undefined;
    [pages, events, bytes] = [0, 0, 0];
    do {
      const page = await env.client.workflowService.getWorkflowExecutionHistory({
        namespace: env.client.options.namespace,
        execution,
        nextPageToken: token,
        waitNewEvent: true,
        maximumPageSize: 1000,
      });
      pages++;
      events += page.history?.events?.length ?? 0;
      bytes += temporal.api.history.v1.History.encode(page.history ?? {}).finish().length;
      token = page.nextPageToken && page.nextPageToken.length > 0 ? page.nextPageToken : undefined;
    } while (token);
    times.push(performance.now() - t);
  }
  return { calls, events, pages, kib: bytes / 1024, ms: spread(times) };
}

export async function measureCancel(env: BenchEnv, opts: CancelOptions) {
  const log = path.join(env.dir, 'cancel-received.jsonl');
  const http = await startHttpExample(env.reader, {
    OZ0_RECEIVED_LOG: log,
    READER_STATE: path.join(env.dir, 'cancel-seen.json'),
  });
  const taskQueue = 'oz0-cancel';
  const config = benchConfig(env, taskQueue, {
    servers: {
      stdio: {
        command: 'node',
        args: [env.reader],
        env: { OZ0_RECEIVED_LOG: log, READER_STATE: path.join(env.dir, 'cancel-s.json') },
      },
      http: { url: http.url },
    },
    node: { slots: Math.max(200, opts.calls * 2) },
  });
  const target = policyTargetOf(config, env.client);
  const latencies: Record<string, number[]> = {};
  /** Where a cancel's time goes, from the job's history (the server's clock is this machine's). */
  const segments: Record<string, number[]> = {};
  let firstRead: Awaited<ReturnType<typeof measureFirstRead>> | undefined;
  /** The node's own record of its follows, after the cancels (before the kill switches' calls). */
  let follows: JobFollowCounts | undefined;
  try {
    await withNode(env, config, async (node) => {
      await approveListing(target, 'bench', await readListing(config, env.logger, 'http'));
      const startSleep = (tool: string, tenant = 'bench') =>
        env.client.workflow.start('job', {
          taskQueue,
          workflowId: env.id('cancel'),
          args: [{ tenant, steps: [{ call: tool, args: { ms: 120_000 } }] }],
        });
      const keyOf = (id: string) => `${id}/c1`;
      // What both servers were sent, as they write it down: call starts and notifications/cancelled, by key.
      const tail = tailReceived(log);
      const startedKeys = new Set<string>();
      const cancelled = new Map<string, Record<string, unknown>>();
      const look = () => {
        for (const r of tail()) {
          if (r.event === 'start') startedKeys.add(r.key as string);
          if (r.event === 'cancelled') cancelled.set(r.key as string, r);
        }
      };
      const started = () => {
        look();
        return startedKeys;
      };
      /** The server's notifications/cancelled records, once there is one for every key. */
      const allCancelled = (what: string, keys: Set<string>) =>
        until(
          what,
          () => {
            look();
            const c = [...keys].map((k) => cancelled.get(k)).filter((r) => r !== undefined);
            return c.length === keys.size ? c : undefined;
          },
          30_000,
        );

      for (const transport of ['stdio', 'http']) {
        const values: number[] = (latencies[`cancel_${transport}`] = []);
        for (let done = 0; done < opts.cancels; done += opts.batch) {
          const batch = await Promise.all(
            Array.from({ length: Math.min(opts.batch, opts.cancels - done) }, () => startSleep(`${transport}.sleep`)),
          );
          await until(
            'the calls to start',
            () => (batch.every((h) => started().has(keyOf(h.workflowId))) ? true : undefined),
            30_000,
          );
          const asked = new Map<string, number>();
          await Promise.all(
            batch.map(async (h) => {
              asked.set(keyOf(h.workflowId), Date.now());
              await h.cancel();
            }),
          );
          const seen = await allCancelled('notifications/cancelled', new Set(asked.keys()));
          for (const c of seen) values.push((c.t as number) - asked.get(c.key as string)!);
          await Promise.all(batch.map((h) => h.result().catch(() => undefined)));
          for (const h of batch) {
            const c = cancelled.get(keyOf(h.workflowId))!;
            const at = await cancelEvents(h);
            const t0 = asked.get(keyOf(h.workflowId))!;
            (segments[`${transport}_request`] ??= []).push(at.requested - t0);
            // Stopped before Temporal had recorded the activity's cancel: the node's follow of the job's history did.
            if ((c.t as number) < at.activity) {
              (segments[`${transport}_follow`] ??= []).push((c.t as number) - t0);
              (segments[`${transport}_read`] ??= []).push((c.t as number) - at.requested);
              continue;
            }
            (segments[`${transport}_temporal`] ??= []).push((c.t as number) - t0);
            (segments[`${transport}_workflow`] ??= []).push(at.activity - at.requested);
            // The workflow task apart: waiting to be handed to a node, then the node's work and its answer.
            (segments[`${transport}_dispatch`] ??= []).push(at.started - Math.max(at.requested, at.scheduled));
            (segments[`${transport}_task`] ??= []).push(at.completed - at.started);
            (segments[`${transport}_heartbeat`] ??= []).push((c.t as number) - at.activity);
          }
        }
        // The node's own clock of the follows' reads: Temporal writing each cancel → the node reading it.
        const reads = node.follows.record.readMs;
        segments[`${transport}_lag`] = reads.slice(-opts.cancels);
      }
      follows = node.follows.record;

      // Kill-switch fan-out: `calls` running calls over `tenants` tenants, one switch for every tenant.
      const jobs = await Promise.all(
        Array.from({ length: opts.calls }, (_, i) => startSleep('stdio.sleep', `bench-t${i % opts.tenants}`)),
      );
      await until(
        'every call to start',
        () => (jobs.every((h) => started().has(keyOf(h.workflowId))) ? true : undefined),
        60_000,
      );
      const thrownAt = Date.now();
      await changePolicy(target, '*', killUpdate, ['stdio.sleep']);
      const killed = await allCancelled('every call to be stopped', new Set(jobs.map((h) => keyOf(h.workflowId))));
      latencies.kill_fanout = killed.map((c) => (c.t as number) - thrownAt);
      await Promise.all(jobs.map((h) => h.result().catch(() => undefined)));
      // Leave no switch behind for the measures after this one.
      await changePolicy(target, '*', reviveUpdate, ['stdio.sleep']);
      firstRead = await measureFirstRead(env, taskQueue, opts.longCalls);
    });
  } finally {
    await http.close();
  }
  const stats = spreads(latencies);
  const parts = spreads(segments);
  const rows: Row[] = (['stdio', 'http'] as const).map((t) => {
    const s = stats[`cancel_${t}`];
    const p50 = (part: string) => fixed(parts[`${t}_${part}`]?.p50 ?? NaN, 0);
    const byFollow = parts[`${t}_follow`];
    const viaFollow = byFollow
      ? `${byFollow.n} by the job's history (p50 ${fixed(byFollow.p50, 0)}, p99 ${fixed(byFollow.p99, 0)} ms; ` +
        `cancel recorded ${p50('request')}, then read, stopped and heard ${p50('read')} ms, ` +
        `of which read by the node ${p50('lag')})`
      : "none by the job's history";
    const byTask = parts[`${t}_temporal`];
    const viaTask = byTask
      ? `${byTask.n} by the job's workflow task (p50 ${fixed(byTask.p50, 0)} ms; its parts at p50: ` +
        `workflow task to the activity's cancel ${p50('workflow')} (to a node ${p50('dispatch')}, on it ` +
        `${p50('task')}), the cancel's way to the node (${env.cancels}) and the notification ${p50('heartbeat')} ms)`
      : "none by the job's workflow task";
    return {
      measure: `(c) cancel → notification, ${t === 'http' ? 'Streamable HTTP' : 'stdio'}`,
      figure:
        `p50 ${fixed(s.p50, 0)} ms, p99 ${fixed(s.p99, 0)} ms (n=${s.n}, ${opts.batch} at once): ` +
        `${viaFollow}; ${viaTask}`,
      target: 'p50 ≤ 50 ms, p99 ≤ 150 ms',
      met: s.p50 <= 50 && s.p99 <= 150,
    };
  });
  const k = stats.kill_fanout;
  rows.push({
    measure: `(d) kill switch → ${opts.calls} running calls`,
    figure: `p50 ${fixed(k.p50, 0)} ms, p99 ${fixed(k.p99, 0)} ms, max ${fixed(k.max, 0)} ms (${opts.tenants} tenants)`,
    target: 'p99 ≤ 200 ms',
    met: k.p99 <= 200,
  });
  if (follows) {
    rows.push({
      measure: "(c) the node's follows of jobs (issue 36.4)",
      figure:
        `${follows.started} started, ${follows.stopped} calls stopped by a cancel read, ` +
        `${follows.full} not started for want of room, ${follows.failed} ended on an error`,
    });
  }
  if (firstRead) {
    rows.push({
      measure: `(c) a follow's first read of a ${opts.longCalls}-call run`,
      figure:
        `${firstRead.events} events in ${firstRead.pages} pages (${fixed(firstRead.kib, 0)} KiB): ` +
        `p50 ${fixed(firstRead.ms.p50, 1)} ms, max ${fixed(firstRead.ms.max, 1)} ms (n=${firstRead.ms.n})`,
    });
  }
  return { rows, data: { ...opts, latencies: stats, segments: parts, follows, firstRead } };
}
