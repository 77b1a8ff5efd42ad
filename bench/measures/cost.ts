/**
 * (a) The cost of one call, interleaved in one run: an oz0 job of sequential echo calls, a bare Temporal workflow
 * whose activity makes the same MCP call, and the MCP SDK call alone — the same reader server binary.
 */
import { fixed, mean, spreads } from '../common';
import type { Row } from '../common';
import { benchConfig, echoSteps, startBareWorker, withNode } from '../env';
import type { BenchEnv } from '../env';
import { addTaskParts, describeTaskParts, noTaskParts } from '../task-parts';

export interface CostOptions {
  calls: number;
  rounds: number;
}

export async function measureCost(env: BenchEnv, opts: CostOptions) {
  const config = benchConfig(env, 'oz0-cost', { jobs: { continueAsNewAfterCalls: 10_000 } });
  const bare = await startBareWorker(env, 'bare-cost');
  const perCall: Record<'oz0' | 'bare' | 'sdk', number[]> = { oz0: [], bare: [], sdk: [] };
  const parts = { oz0: noTaskParts(), bare: noTaskParts() };
  /** C1: jobs the node followed for their cancels (issue 36.4): none, echo calls being shorter than the threshold. */
  let followed = 0;
  try {
    await withNode(env, config, async (node) => {
      const steps = echoSteps(opts.calls);
      const ids = { oz0: '', bare: '' };
      const oz0 = async (n: number) =>
        (
          await env.client.workflow.start('job', {
            taskQueue: 'oz0-cost',
            workflowId: (ids.oz0 = env.id('cost-oz0')),
            args: [{ tenant: 'bench', steps: steps.slice(0, n) }],
          })
        ).result();
      const bareJob = (n: number) =>
        env.client.workflow.execute('bareJob', {
          taskQueue: bare.taskQueue,
          workflowId: (ids.bare = env.id('cost-bare')),
          args: [n],
        });
      // Warm both paths so bundles, server processes and caches are in place.
      await oz0(10);
      await bareJob(10);
      for (let r = 0; r < opts.rounds; r++) {
        let t = performance.now();
        await oz0(opts.calls);
        perCall.oz0.push((performance.now() - t) / opts.calls);
        t = performance.now();
        await bareJob(opts.calls);
        perCall.bare.push((performance.now() - t) / opts.calls);
        t = performance.now();
        for (let i = 0; i < opts.calls; i++) await bare.mcp.callTool({ name: 'echo', arguments: { text: `t${i}` } });
        perCall.sdk.push((performance.now() - t) / opts.calls);
        // Read after the timed calls: where each kind's time went between Temporal's tasks.
        await addTaskParts(env.client, ids.oz0, parts.oz0);
        await addTaskParts(env.client, ids.bare, parts.bare);
      }
      followed = node.follows.record.started;
    });
  } finally {
    await bare.close();
  }
  const oz0 = mean(perCall.oz0);
  const bareMs = mean(perCall.bare);
  const sdk = mean(perCall.sdk);
  const ratio = oz0 / bareMs;
  const tasks = { oz0: spreads(parts.oz0), bare: spreads(parts.bare) };
  const rows: Row[] = [
    {
      measure: '(a) one call: oz0 / bare activity',
      figure:
        `${fixed(ratio, 2)} (${fixed(oz0)} / ${fixed(bareMs)} ms; SDK alone ${fixed(sdk, 2)} ms; ` +
        `jobs followed for their cancels: ${followed})`,
      target: '≤ 1.05',
      met: ratio <= 1.05,
    },
    {
      measure: "(a) a call's tasks, p50 dispatch + run: oz0 / bare",
      figure: `${describeTaskParts(tasks.oz0)} / ${describeTaskParts(tasks.bare)}`,
    },
  ];
  return { rows, data: { ...opts, msPerCall: perCall, oz0, bare: bareMs, sdk, ratio, followed, tasks } };
}
