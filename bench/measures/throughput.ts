/**
 * (b) Throughput, and with `ceiling` N2's node ceiling (`--only ceiling`): 1, 10 and 100 jobs at once, each making `calls` sequential echo calls, on an oz0 node and on a
 * bare worker with the same slots; calls per second over the wall time of the whole batch, interleaved rounds; the share is the median of the
 * rounds' oz0 / bare ratios.
 */
import { cpuSeconds, fixed, mean, percentile } from '../common';
import type { Row } from '../common';
import { benchConfig, echoSteps, startBareWorker, withNode } from '../env';
import type { BenchEnv } from '../env';
import { descendants } from '../../worker/processes';

/** CPU seconds used so far by this process (the node or the bare worker, and the client), the server, the rest. */
function cpuNow(env: BenchEnv) {
  const server = cpuSeconds(env.server.pid);
  const all = [process.pid, ...descendants(process.pid)].reduce((sum, pid) => sum + cpuSeconds(pid), 0);
  return { server, all };
}

export interface ThroughputOptions {
  jobs: number[];
  calls: number;
  rounds: number;
  /**
   * N2, a node's ceiling: the slots of both (fewer than the jobs, so they fill), and the rows it asks for — each size
   * against bare (≥ 90 %), and a call at the largest size against one at the smallest (≤ 1.1 ×).
   */
  ceiling?: { slots: number };
}

export async function measureThroughput(env: BenchEnv, opts: ThroughputOptions) {
  const slots = opts.ceiling?.slots ?? Math.max(100, ...opts.jobs);
  const config = benchConfig(env, 'oz0-tput', {
    node: opts.ceiling ? { slots, reserveSlots: 0 } : { slots },
  });
  const bare = await startBareWorker(env, 'bare-tput', slots);
  const perSecond: Record<string, { oz0: number[]; bare: number[] }> = {};
  /** CPU ms per call on the whole machine and in the Temporal server, for each batch. */
  const cpu: Record<string, Record<'oz0' | 'bare', { all: number[]; server: number[] }>> = {};
  try {
    await withNode(env, config, async () => {
      const steps = echoSteps(opts.calls);
      const oz0Batch = (jobs: number) =>
        Promise.all(
          Array.from({ length: jobs }, async () =>
            (
              await env.client.workflow.start('job', {
                taskQueue: 'oz0-tput',
                workflowId: env.id('tput-oz0'),
                args: [{ tenant: 'bench', steps }],
                // N2: started as oz0's own client starts a job (client/jobs.ts), its tenant as its fairness key.
                ...(opts.ceiling ? { priority: { fairnessKey: 'bench' } } : {}),
              })
            ).result(),
          ),
        );
      const bareBatch = (jobs: number) =>
        Promise.all(
          Array.from({ length: jobs }, () =>
            env.client.workflow.execute('bareJob', {
              taskQueue: bare.taskQueue,
              workflowId: env.id('tput-bare'),
              args: [opts.calls],
            }),
          ),
        );
      await oz0Batch(2);
      await bareBatch(2);
      for (const jobs of opts.jobs) {
        const rate = (perSecond[jobs] = { oz0: [] as number[], bare: [] as number[] });
        const used = (cpu[jobs] = {
          oz0: { all: [] as number[], server: [] as number[] },
          bare: { all: [] as number[], server: [] as number[] },
        });
        for (let r = 0; r < opts.rounds; r++) {
          // Alternate which goes first so neither always runs on a warmer (or more tired) server.
          const order = r % 2 ? (['bare', 'oz0'] as const) : (['oz0', 'bare'] as const);
          for (const which of order) {
            const t = performance.now();
            const before = cpuNow(env);
            await (which === 'oz0' ? oz0Batch(jobs) : bareBatch(jobs));
            rate[which].push((jobs * opts.calls) / ((performance.now() - t) / 1000));
            const after = cpuNow(env);
            used[which].all.push(((after.all - before.all) * 1000) / (jobs * opts.calls));
            used[which].server.push(((after.server - before.server) * 1000) / (jobs * opts.calls));
          }
        }
      }
    });
  } finally {
    await bare.close();
  }
  const rows: Row[] = opts.jobs.map((jobs) => {
    const oz0 = mean(perSecond[jobs].oz0);
    const bareRate = mean(perSecond[jobs].bare);
    // Each round's oz0 batch against the bare batch right beside it, the median of those: this machine's
    // slow spells (other tenants of the host) hit a pair together far more often than a whole series.
    const share = percentile(
      perSecond[jobs].oz0.map((v, i) => v / perSecond[jobs].bare[i]),
      50,
    );
    const c = cpu[jobs];
    const cpuRatio = mean(c.oz0.all) / mean(c.bare.all);
    if (opts.ceiling)
      return {
        measure: `(N2) a node's ceiling: ${jobs} jobs of ${opts.calls} call${opts.calls === 1 ? '' : 's'} on ${slots} slots`,
        figure:
          `${fixed(share * 100, 0)} % of bare (${fixed(oz0, 1)} / ${fixed(bareRate, 1)} calls/s; ` +
          `CPU ms per call ${fixed(mean(c.oz0.all))} / ${fixed(mean(c.bare.all))}, ` +
          `server ${fixed(mean(c.oz0.server))} / ${fixed(mean(c.bare.server))})`,
        target: '≥ 90 % of bare',
        met: share >= 0.9,
      };
    return {
      measure: `(b) throughput, ${jobs} job${jobs === 1 ? '' : 's'} at once`,
      figure:
        `${fixed(share * 100, 0)} % of bare (${fixed(oz0, 0)} / ${fixed(bareRate, 0)} calls/s; ` +
        `CPU ms per call ${fixed(mean(c.oz0.all))} / ${fixed(mean(c.bare.all))}, ` +
        `server ${fixed(mean(c.oz0.server))} / ${fixed(mean(c.bare.server))}: ${fixed(cpuRatio, 2)} ×)`,
      target: '≥ 95 %, CPU ≤ 1.10 ×',
      met: share >= 0.95 && cpuRatio <= 1.1,
    };
  });
  if (opts.ceiling) {
    // The same work as many more jobs: what a call costs at the largest size against the smallest.
    const [small, big] = [Math.min(...opts.jobs), Math.max(...opts.jobs)];
    const perCall = mean(perSecond[small].oz0) / mean(perSecond[big].oz0);
    rows.push({
      measure: `(N2) a call among ${big} jobs against among ${small}, on ${slots} slots`,
      figure: `${fixed(perCall, 2)} × (${fixed(mean(perSecond[big].oz0), 1)} against ${fixed(mean(perSecond[small].oz0), 1)} calls/s)`,
      target: '≤ 1.1 ×',
      met: perCall <= 1.1,
    });
  }
  return { rows, data: { ...opts, slots, callsPerSecond: perSecond, cpuMsPerCall: cpu } };
}
