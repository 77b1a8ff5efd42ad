/**
 * The cost of a call a harness makes through the node's gateway (H4: MCP to the gateway, a workflow Update, the
 * call's activity, the answer back) against the same call in a scripted session, on the same node and reader server.
 * Per call: from the first call's activity scheduled to the last one's completion, in the job's own history, over
 * the number of calls — the harness's start and its MCP handshake are outside that span, as a session's opening is.
 *
 * With `local` (issue 36.6's experiment, `--gateway-local`), a third kind alternates with the two: the same harness
 * with its calls as local activities (the node's OZ0_EXPERIMENT_LOCAL_LIVE_CALLS, read as each job starts). A local
 * activity leaves no activity events, so both gateway kinds are also measured by their Updates: from the first call's
 * Update accepted to the last one's completed, over the number of calls.
 */
import type { Client } from '@temporalio/client';
import { LOCAL_LIVE_CALLS } from '../../activities';
import { fixed, mean, spread } from '../common';
import type { Row } from '../common';
import { benchConfig, echoSteps, withNode } from '../env';
import type { BenchEnv } from '../env';

export interface GatewayOptions {
  calls: number;
  rounds: number;
  /** Also the calls as local activities (issue 36.6). */
  local: boolean;
}

type Kind = 'scripted' | 'gateway' | 'local';
type History = Awaited<ReturnType<ReturnType<Client['workflow']['getHandle']>['fetchHistory']>>;
type HistoryEvent = NonNullable<History['events']>[number];

const at = (e: HistoryEvent) => Number(e.eventTime!.seconds) * 1000 + (e.eventTime!.nanos ?? 0) / 1e6;

/** Milliseconds per call from a live session's Updates: the first accepted to the last completed, over the calls. */
function perCallByUpdates(events: HistoryEvent[], calls: number): number | undefined {
  const accepted = events.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes);
  const completed = events.filter((e) => e.workflowExecutionUpdateCompletedEventAttributes);
  if (accepted.length === 0 || completed.length === 0) return undefined;
  return (at(completed.at(-1)!) - at(accepted[0])) / calls;
}

/**
 * A local call's parts: `task` (the workflow task that ran it: started → completed, the local activity inside) and
 * `harness` (an Update's completion → the next workflow task scheduled: the answer to the harness, its next
 * tools/call and the Update reaching the server), p50 over the calls.
 */
function localParts(events: HistoryEvent[]): { task: number[]; harness: number[] } {
  const task: number[] = [];
  const harness: number[] = [];
  let started: HistoryEvent | undefined;
  let completed: HistoryEvent | undefined;
  let lastUpdate: HistoryEvent | undefined;
  let live = false;
  for (const e of events) {
    if (e.workflowTaskScheduledEventAttributes && lastUpdate) {
      harness.push(at(e) - at(lastUpdate));
      lastUpdate = undefined;
    }
    if (e.workflowTaskStartedEventAttributes) started = e;
    if (e.workflowTaskCompletedEventAttributes) completed = e;
    if (e.workflowExecutionUpdateAcceptedEventAttributes) live = true;
    if (live && e.markerRecordedEventAttributes && started && completed) task.push(at(completed) - at(started));
    if (e.workflowExecutionUpdateCompletedEventAttributes) lastUpdate = e;
  }
  return { task, harness };
}

/** Where a call's time goes, over a job's calls, from its history: see {@link timesOf}. */
type Parts = Record<'activity' | 'between' | 'recorded' | 'harness', number[]>;

const noParts = (): Parts => ({ activity: [], between: [], recorded: [], harness: [] });

/**
 * Milliseconds per call over a job's calls, from its history, and its parts: `activity` (scheduled → completed),
 * `between` (a call's completion → the next call scheduled); for a gateway call, `recorded` (the completion → the
 * Update's completion, a workflow task, no longer on the harness's path: it is answered once the completion is
 * durable, issue 26.3) and `harness` (the completion → the next Update accepted: the answer to the harness, its next
 * tools/call, the Update and the workflow task that accepts it and schedules the activity).
 */
async function timesOf(
  client: Client,
  workflowId: string,
  calls: number,
): Promise<{ perCall: number; byUpdates?: number; parts: Parts; events: HistoryEvent[] }> {
  const events = (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  const byUpdates = perCallByUpdates(events, calls);
  const scheduled = events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'callTool');
  // Only the calls' own completions: the session's other activities (its node's description, the harness) complete too.
  const ids = new Set(scheduled.map((e) => String(e.eventId)));
  const completed = events.filter(
    (e) =>
      e.activityTaskCompletedEventAttributes &&
      ids.has(String(e.activityTaskCompletedEventAttributes.scheduledEventId)),
  );
  const updated = events.filter((e) => e.workflowExecutionUpdateCompletedEventAttributes);
  const accepted = events.filter((e) => e.workflowExecutionUpdateAcceptedEventAttributes);
  const parts = noParts();
  for (let i = 0; i < completed.length; i++) {
    parts.activity.push(at(completed[i]) - at(scheduled[i]));
    if (i + 1 < scheduled.length) parts.between.push(at(scheduled[i + 1]) - at(completed[i]));
    if (updated[i]) parts.recorded.push(at(updated[i]) - at(completed[i]));
    if (accepted[i + 1]) parts.harness.push(at(accepted[i + 1]) - at(completed[i]));
  }
  if (completed.length === 0) return { perCall: byUpdates ?? NaN, byUpdates, parts, events };
  return { perCall: (at(completed.at(-1)!) - at(scheduled[0])) / calls, byUpdates, parts, events };
}

export async function measureGateway(env: BenchEnv, opts: GatewayOptions) {
  const config = benchConfig(env, 'oz0-gateway', {
    harnesses: {
      writer: {
        command: 'node',
        args: [`${env.root}/dist/bench/writer-harness.js`],
        tools: ['reader.*'],
        timeoutSeconds: 600,
        sandbox: { read: ['dist', 'node_modules'] },
      },
    },
    jobs: { continueAsNewAfterCalls: 10_000, maxCallsPerSession: 10_000 },
  });
  const perCall: Record<Kind, number[]> = { gateway: [], scripted: [], local: [] };
  const byUpdates: Record<Kind, number[]> = { gateway: [], scripted: [], local: [] };
  const parts = { gateway: noParts(), scripted: noParts() };
  const local = { task: [] as number[], harness: [] as number[] };
  const kinds: Kind[] = opts.local ? ['scripted', 'gateway', 'local'] : ['scripted', 'gateway'];
  await withNode(env, config, async () => {
    const run = async (kind: Kind, n: number) => {
      const steps = echoSteps(n);
      const session =
        kind === 'scripted'
          ? { session: steps }
          : { session: { harness: 'writer', input: { calls: steps.map((s) => ({ tool: s.call, args: s.args })) } } };
      const workflowId = env.id(`gateway-${kind}`);
      // Read by the node as the job resolves its settings (the job's first task), so the switch is per job.
      if (kind === 'local') process.env[LOCAL_LIVE_CALLS] = '1';
      else delete process.env[LOCAL_LIVE_CALLS];
      try {
        await env.client.workflow.execute('job', {
          taskQueue: 'oz0-gateway',
          workflowId,
          args: [{ tenant: 'bench', steps: [session] }],
        });
      } finally {
        delete process.env[LOCAL_LIVE_CALLS];
      }
      return timesOf(env.client, workflowId, n);
    };
    for (const kind of kinds) await run(kind, 10);
    for (let r = 0; r < opts.rounds; r++) {
      for (const kind of kinds) {
        const times = await run(kind, opts.calls);
        perCall[kind].push(times.perCall);
        if (times.byUpdates !== undefined) byUpdates[kind].push(times.byUpdates);
        if (kind === 'local') {
          const lp = localParts(times.events);
          local.task.push(...lp.task);
          local.harness.push(...lp.harness);
          continue;
        }
        for (const part of Object.keys(times.parts) as Array<keyof Parts>) parts[kind][part].push(...times.parts[part]);
      }
    }
  });
  const gateway = mean(perCall.gateway);
  const scripted = mean(perCall.scripted);
  const ratio = gateway / scripted;
  const spreads = (p: Parts) => Object.fromEntries(Object.entries(p).map(([k, v]) => [k, spread(v)]));
  const g = spreads(parts.gateway);
  const sc = spreads(parts.scripted);
  const p50 = (s: { p50: number }) => fixed(s.p50, 1);
  const rows: Row[] = [
    {
      measure: '(H4) a call through the gateway / the same call in a scripted session',
      figure:
        `${fixed(ratio, 2)} (${fixed(gateway)} / ${fixed(scripted)} ms per call; p50 of its parts: activity ` +
        `${p50(g.activity)} / ${p50(sc.activity)}, between calls ${p50(g.between)} / ${p50(sc.between)}, of which ` +
        `the harness's next call accepted ${p50(g.harness)} ms; the Update completed, off its path, ${p50(g.recorded)})`,
      target: '≤ 1.25',
      met: ratio <= 1.25,
    },
  ];
  if (opts.local) {
    const byUpd = mean(byUpdates.gateway);
    const localMs = mean(byUpdates.local);
    const localRatio = localMs / scripted;
    rows.push({
      measure: "(36.6) the gateway's calls as local activities / the same call in a scripted session",
      figure:
        `${fixed(localRatio, 2)} (${fixed(localMs)} / ${fixed(scripted)} ms per call, by the Updates; activities by ` +
        `the Updates ${fixed(byUpd)} ms, ${fixed(byUpd / scripted, 2)}; p50 of its parts: the workflow task that ` +
        `runs it ${p50(spread(local.task))}, its Update's completion → the next workflow task ` +
        `${p50(spread(local.harness))})`,
      target: '≤ 1.25',
      met: localRatio <= 1.25,
    });
  }
  return {
    rows,
    data: {
      ...opts,
      msPerCall: perCall,
      gateway,
      scripted,
      ratio,
      parts: { gateway: g, scripted: sc },
      ...(opts.local
        ? {
            msPerCallByUpdates: byUpdates,
            local: { ratio: mean(byUpdates.local) / scripted, task: spread(local.task), harness: spread(local.harness) },
          }
        : {}),
    },
  };
}
