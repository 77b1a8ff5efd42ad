/**
 * The cost of a call a harness makes through the node's gateway (H4: MCP to the gateway, a workflow Update, the
 * call's activity, the answer back) against the same call in a scripted session, on the same node and reader server.
 * Per call: from the first call's activity scheduled to the last one's completion, in the job's own history, over
 * the number of calls — the harness's start and its MCP handshake are outside that span, as a session's opening is.
 */
import type { Client } from '@temporalio/client';
import { timestampMs } from '../../common/time';
import { fixed, mean, spreads } from '../common';
import type { Row } from '../common';
import { benchConfig, echoSteps, withNode } from '../env';
import type { BenchEnv } from '../env';
import { describeTaskParts, noTaskParts, taskPartsOf } from '../task-parts';
import type { TaskParts } from '../task-parts';

export interface GatewayOptions {
  calls: number;
  rounds: number;
}

/** Where a call's time goes, over a job's calls, from its history: see {@link timesOf}. */
type Parts = Record<'activity' | 'between' | 'recorded' | 'harness' | 'resultTask' | 'updateTask' | 'waited', number[]>;

const noParts = (): Parts => ({
  activity: [],
  between: [],
  recorded: [],
  harness: [],
  resultTask: [],
  updateTask: [],
  waited: [],
});

/**
 * Milliseconds per call over a job's calls, from its history, and its parts: `activity` (scheduled → completed),
 * `between` (a call's completion → the next call scheduled); for a gateway call, `recorded` (the completion → the
 * Update's completion, a workflow task, no longer on the harness's path: it is answered once the completion is
 * durable, issue 26.3) and `harness` (the completion → the next Update accepted: the answer to the harness, its next
 * tools/call, the Update and the workflow task that accepts it and schedules the activity).
 *
 * The two workflow tasks on a gateway call's path, each from its start to its completion: `resultTask`, the one that
 * records the call's result and completes its Update (a scripted call's one task, which also schedules the next
 * call), and `updateTask`, the one that accepts the next call's Update and schedules its activity; `waited`, the
 * result task's completion → the next task scheduled: near zero when the harness's next Update was already waiting
 * behind the result task (then the harness is off the path, and a call is its activity and two tasks, SPEC H4's
 * floor).
 */
async function timesOf(
  client: Client,
  workflowId: string,
  calls: number,
  tasks: TaskParts,
): Promise<{ perCall: number; parts: Parts }> {
  const events = (await client.workflow.getHandle(workflowId).fetchHistory()).events ?? [];
  taskPartsOf(events, tasks);
  const at = (e: (typeof events)[number]) => timestampMs(e.eventTime);
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
  const index = new Map(events.map((e, i) => [String(e.eventId), i]));
  /** The workflow task whose completion an event follows: its start → its completion, and where it completed. */
  const taskBefore = (e: (typeof events)[number]) => {
    for (let i = index.get(String(e.eventId))! - 1; i >= 0; i--) {
      const done = events[i].workflowTaskCompletedEventAttributes;
      if (!done) continue;
      const started = events[index.get(String(done.startedEventId))!];
      return { ms: at(events[i]) - at(started), completed: i };
    }
    return undefined;
  };
  const parts = noParts();
  for (let i = 0; i < completed.length; i++) {
    parts.activity.push(at(completed[i]) - at(scheduled[i]));
    if (i + 1 < scheduled.length) parts.between.push(at(scheduled[i + 1]) - at(completed[i]));
    if (updated[i]) parts.recorded.push(at(updated[i]) - at(completed[i]));
    if (accepted[i + 1]) parts.harness.push(at(accepted[i + 1]) - at(completed[i]));
    // A scripted call's result is recorded by the task that schedules the next call.
    const result = updated[i] ? taskBefore(updated[i]) : scheduled[i + 1] && taskBefore(scheduled[i + 1]);
    if (result) parts.resultTask.push(result.ms);
    const update = accepted[i + 1] && taskBefore(accepted[i + 1]);
    if (update) parts.updateTask.push(update.ms);
    if (result && update) {
      const next = events.slice(result.completed + 1).find((e) => e.workflowTaskScheduledEventAttributes);
      if (next) parts.waited.push(at(next) - at(events[result.completed]));
    }
  }
  return { perCall: (at(completed.at(-1)!) - at(scheduled[0])) / calls, parts };
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
  const perCall: Record<'gateway' | 'scripted', number[]> = { gateway: [], scripted: [] };
  const parts = { gateway: noParts(), scripted: noParts() };
  const taskParts = { gateway: noTaskParts(), scripted: noTaskParts() };
  await withNode(env, config, async () => {
    /** A job of `n` calls of `kind`; its tasks' parts go to `tasks` (the warm-up's to none kept). */
    const run = async (kind: 'gateway' | 'scripted', n: number, tasks = noTaskParts()) => {
      const steps = echoSteps(n);
      const session =
        kind === 'scripted'
          ? { session: steps }
          : { session: { harness: 'writer', input: { calls: steps.map((s) => ({ tool: s.call, args: s.args })) } } };
      const workflowId = env.id(`gateway-${kind}`);
      await env.client.workflow.execute('job', {
        taskQueue: 'oz0-gateway',
        workflowId,
        args: [{ tenant: 'bench', steps: [session] }],
      });
      return timesOf(env.client, workflowId, n, tasks);
    };
    await run('scripted', 10);
    await run('gateway', 10);
    for (let r = 0; r < opts.rounds; r++) {
      for (const kind of ['scripted', 'gateway'] as const) {
        const times = await run(kind, opts.calls, taskParts[kind]);
        perCall[kind].push(times.perCall);
        for (const part of Object.keys(times.parts) as Array<keyof Parts>) parts[kind][part].push(...times.parts[part]);
      }
    }
  });
  const gateway = mean(perCall.gateway);
  const scripted = mean(perCall.scripted);
  const ratio = gateway / scripted;
  const g = spreads(parts.gateway);
  const sc = spreads(parts.scripted);
  const tasks = { gateway: spreads(taskParts.gateway), scripted: spreads(taskParts.scripted) };
  const p50 = (s: { p50: number }) => fixed(s.p50, 1);
  const rows: Row[] = [
    {
      measure: '(H4) a call through the gateway / the same call in a scripted session',
      figure:
        `${fixed(ratio, 2)} (${fixed(gateway)} / ${fixed(scripted)} ms per call; p50 of its parts: activity ` +
        `${p50(g.activity)} / ${p50(sc.activity)}, between calls ${p50(g.between)} / ${p50(sc.between)}, of which ` +
        `the harness's next call accepted ${p50(g.harness)} ms; the Update completed, off its path, ${p50(g.recorded)}; ` +
        `its two workflow tasks, the result's ${p50(g.resultTask)} and the next Update's ${p50(g.updateTask)} ms ` +
        `against a scripted call's one ${p50(sc.resultTask)}, the second scheduled ${p50(g.waited)} ms after the first)`,
      target: '≤ 1.25',
      met: ratio <= 1.25,
    },
    {
      measure: "(H4) a call's tasks, p50 dispatch + run: gateway / scripted session",
      figure: `${describeTaskParts(tasks.gateway)} / ${describeTaskParts(tasks.scripted)}`,
    },
  ];
  return {
    rows,
    data: {
      ...opts,
      msPerCall: perCall,
      gateway,
      scripted,
      ratio,
      parts: { gateway: g, scripted: sc },
      tasks,
    },
  };
}
