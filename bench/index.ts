/**
 * `npm run bench`: every measure in one run on one dev server, printed as a table against its target and written
 * to bench/results/bench-<when>.json with the machine's details. Never part of `npm test`.
 *
 *   npm run bench -- [--quick] [--only cost,throughput,payloads,answers,cancel,long,memory,gateway,sandbox,observability,cli,fairness,scale,open,ceiling,versioning,default] [--scale-parts waiting,caps,sessions] [--waiting-calls N] [--open-jobs N] [--temporal host:port]
 *
 * `default` is (a) once more on a dev server with its own queue readers (20 reads a second), for the record: the
 * floor every figure had before oz0 raised them.
 */
import { Command, Option } from 'commander';
import { z } from 'zod';
import { createLogger } from '../common/logger';
import { listOption, machine, table, writeResults } from './common';
import type { Row } from './common';
import { openBenchEnv } from './env';
import { measureCancel } from './measures/cancel';
import { measureCost } from './measures/cost';
import { measureGateway } from './measures/gateway';
import { measureLongJob } from './measures/long-job';
import { measureMemory } from './measures/memory';
import { measureThroughput } from './measures/throughput';
import { measureSandbox } from './measures/sandbox';
import { measureObservability } from './measures/observability';
import { measureCli } from './measures/cli';
import { measurePayloads } from './measures/payloads';
import { measureFairness } from './measures/fairness';
import { measureAnswers } from './measures/answers';
import { measureScale } from './measures/scale';
import { measureOpenJobs } from './measures/open-jobs';
import { measureVersioning } from './measures/versioning';

const MEASURES = [
  'cost',
  'throughput',
  'payloads',
  'answers',
  'cancel',
  'long',
  'memory',
  'gateway',
  'sandbox',
  'observability',
  'cli',
  'fairness',
  'scale',
  'open',
  'ceiling',
  'versioning',
  'default',
] as const;
const SCALE_PARTS = ['waiting', 'caps', 'sessions'] as const;

const OptionsSchema = z.strictObject({
  quick: z.boolean().default(false),
  temporal: z
    .string()
    .regex(/^[\w.-]+:\d+$/, 'host:port')
    .optional(),
  only: listOption('measure', MEASURES),
  heap: z.boolean().default(false),
  split: z.boolean().default(false),
  cpuProf: z.boolean().default(false),
  heapProf: z.boolean().default(false),
  obsParts: z.boolean().default(false),
  obsBare: z.boolean().default(false),
  gcTrace: z.boolean().default(false),
  obsTry: z
    .string()
    .regex(/^--[\w-]+(=\S+)?( --[\w-]+(=\S+)?)*$/, 'node flags, e.g. --min-semi-space-size=16')
    .optional(),
  cancelBatch: z.coerce.number().int().min(1).max(100).default(10),
  scaleParts: listOption('scale part', SCALE_PARTS),
  openJobs: z.coerce.number().int().min(10).max(100_000).optional(),
  waitingCalls: z.coerce.number().int().min(10).max(100_000).optional(),
});

async function main(): Promise<void> {
  const program = new Command('bench')
    .description('oz0 benchmarks: ratios against a bare Temporal activity, in one run')
    .addOption(new Option('--quick', 'smaller counts, for a look rather than a figure to quote'))
    .addOption(new Option('--only <measures>', `comma-separated: ${MEASURES.join(', ')}`))
    .addOption(
      new Option(
        '--heap',
        'memory: heap snapshots of every thread of both workers with every call running, summed (its peaks not quoted)',
      ),
    )
    .addOption(
      new Option(
        '--split',
        "memory: where both workers' resident memory is with every call running (mappings, V8 heaps by thread and space)",
      ),
    )
    .addOption(new Option('--cpu-prof', 'observability: the workers under --cpu-prof, their profiles summed'))
    .addOption(
      new Option(
        '--heap-prof',
        "observability: every allocation of the workers' main threads sampled over the measured rounds, summed",
      ),
    )
    .addOption(new Option('--waiting-calls <n>', 'scale: the larger size of its calls waiting for a person (1,000)'))
    .addOption(new Option('--open-jobs <n>', 'open: how many jobs (default 10,000; 1,000 with --quick)'))
    .addOption(
      new Option('--scale-parts <parts>', `scale: which of its parts run (${SCALE_PARTS.join(',')}; default all)`),
    )
    .addOption(new Option('--obs-parts', 'observability: also a worker with metrics only and one with tracing only'))
    .addOption(new Option('--obs-bare', 'observability: also the bare worker as a process, the same calls'))
    .addOption(new Option('--gc-trace', "observability: each worker's collections as V8 traces them, by reason"))
    .addOption(new Option('--obs-try <flags>', 'observability: also an untraced node started with these node flags'))
    .addOption(
      new Option(
        '--cancel-batch <n>',
        "cancel: jobs cancelled at once (10, the target's; 1 shows a cancel's own time, without the queue)",
      ),
    )
    .addOption(
      new Option(
        '--temporal <host:port>',
        'measure on this Temporal (e.g. npm run cluster) instead of a dev server',
      ).env('OZ0_BENCH_TEMPORAL'),
    )
    .parse();
  const parsed = OptionsSchema.safeParse(program.opts());
  if (!parsed.success) program.error(`bench: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  const {
    quick,
    temporal,
    heap,
    split,
    cpuProf,
    heapProf,
    obsParts,
    obsBare,
    gcTrace,
    obsTry,
    cancelBatch,
    scaleParts,
    openJobs,
    waitingCalls,
  } = parsed.data!;
  // On a cluster there is no default dev server to compare with.
  const only = temporal ? parsed.data!.only.filter((m) => m !== 'default') : parsed.data!.only;
  const settings = {
    cost: quick ? { calls: 50, rounds: 2 } : { calls: 200, rounds: 3 },
    throughput: quick ? { jobs: [1, 10, 100], calls: 5, rounds: 1 } : { jobs: [1, 10, 100], calls: 16, rounds: 5 },
    // Issue 56.3: Worker Versioning against unversioned bare workers, then what it does at a deploy.
    versioning: quick
      ? { calls: 50, rounds: 3, jobs: [10, 100], jobCalls: 3, jobRounds: 3 }
      : { calls: 200, rounds: 5, jobs: [10, 100], jobCalls: 16, jobRounds: 5 },
    // N2: enough one-call jobs to fill 50 slots, and ten times as many.
    ceiling: { jobs: quick ? [100, 1000] : [200, 2000], calls: 1, rounds: 2, ceiling: { slots: 50 } },
    cancel: {
      ...(quick
        ? { cancels: 20, calls: 100, tenants: 20, longCalls: 200 }
        : { cancels: 100, calls: 100, tenants: 20, longCalls: 1000 }),
      batch: cancelBatch,
    },
    long: quick ? { calls: 1000, perRun: 200 } : { calls: 10_000, perRun: 1000 },
    memory: { calls: quick ? 100 : 500, heap, split },
    gateway: quick ? { calls: 50, rounds: 2 } : { calls: 200, rounds: 3 },
    sandbox: quick ? { starts: 10, calls: 500 } : { starts: 40, calls: 2000 },
    observability: {
      ...(quick ? { calls: 50, rounds: 2 } : { calls: 200, rounds: 6 }),
      cpuProf,
      heapProf,
      parts: obsParts,
      bare: obsBare,
      gcTrace,
      tryFlags: obsTry?.split(' '),
    },
    cli: { rounds: quick ? 3 : 10 },
    payloads: { calls: quick ? 20 : 100 },
    answers: quick
      ? { rounds: 3, smallRounds: 6, smallCalls: 50, concurrent: 10 }
      : { rounds: 7, smallRounds: 40, smallCalls: 50, concurrent: 20 },
    fairness: {
      ...(quick
        ? { flood: 200, rounds: 1, share: 100, capJobs: 15, costCalls: 50, costRounds: 3 }
        : { flood: 1000, rounds: 3, share: 200, capJobs: 40, costCalls: 200, costRounds: 10 }),
      cluster: temporal !== undefined,
    },
    scale: quick
      ? {
          waiting: [100, 1000] as [number, number],
          capped: [
            { calls: 500, ms: 100 },
            { calls: 400, ms: 2000 },
          ],
          sessions: [1, 20] as [number, number],
          sessionCalls: 10,
        }
      : {
          waiting: [100, 1000] as [number, number],
          capped: [
            { calls: 2000, ms: 100 },
            { calls: 2000, ms: 2000 },
          ],
          sessions: [1, 200] as [number, number],
          sessionCalls: 10,
        },
  };
  const scale = {
    ...settings.scale,
    parts: scaleParts,
    ...(waitingCalls ? { waiting: [settings.scale.waiting[0], waitingCalls] as [number, number] } : {}),
  };
  // N1: jobs open at once on two node processes (most of them waiting), on the dev server or the cluster.
  const open = {
    jobs: openJobs ?? (quick ? 1000 : 10_000),
    slots: quick ? 100 : 200,
    longSeconds: quick ? 20 : 30,
    waitSeconds: quick ? 30 : 60,
  };
  const env = await openBenchEnv(temporal);
  const about = { ...machine(env.cli), temporal: temporal ? `${temporal} (npm run cluster)` : 'dev server' };
  process.stdout.write(`machine: ${JSON.stringify(about)}\n`);
  const rows: Row[] = [];
  const data: Record<string, unknown> = {};
  try {
    for (const name of only) {
      const t = performance.now();
      process.stderr.write(`bench: ${name} …\n`);
      const result =
        name === 'cost'
          ? await measureCost(env, settings.cost)
          : name === 'throughput'
            ? await measureThroughput(env, settings.throughput)
            : name === 'cancel'
              ? await measureCancel(env, settings.cancel)
              : name === 'long'
                ? await measureLongJob(env, settings.long)
                : name === 'gateway'
                  ? await measureGateway(env, settings.gateway)
                  : name === 'sandbox'
                    ? await measureSandbox(settings.sandbox)
                    : name === 'observability'
                      ? await measureObservability(env, settings.observability)
                      : name === 'payloads'
                        ? await measurePayloads(env, settings.payloads)
                        : name === 'answers'
                          ? await measureAnswers(env, settings.answers)
                          : name === 'cli'
                            ? await measureCli(env, settings.cli)
                            : name === 'fairness'
                              ? await measureFairness(env, settings.fairness)
                              : name === 'scale'
                                ? await measureScale(env, scale)
                                : name === 'open'
                                  ? await measureOpenJobs(env, open)
                                  : name === 'ceiling'
                                    ? await measureThroughput(env, settings.ceiling)
                                    : name === 'versioning'
                                      ? await measureVersioning(env, settings.versioning)
                                      : name === 'default'
                                        ? await onDefaultServer(settings.cost)
                                        : await measureMemory(env, settings.memory);
      rows.push(...result.rows);
      data[name] = { seconds: Math.round((performance.now() - t) / 100) / 10, ...result.data };
      process.stderr.write(table(result.rows));
    }
  } finally {
    await env.close();
  }
  process.stdout.write(`\n${table(rows)}`);
  const file = writeResults('bench', { machine: about, quick, rows, measures: data });
  process.stdout.write(`results: ${file}\n`);
  if (rows.some((r) => r.met === false)) process.exitCode = 1;
}

/** (a) on a dev server of the server's own defaults, beside the run's own: the figures the floor gave. */
async function onDefaultServer(opts: Parameters<typeof measureCost>[1]) {
  const env = await openBenchEnv(undefined, { dynamicConfig: {} });
  try {
    const result = await measureCost(env, opts);
    const rows: Row[] = result.rows.map((r) => ({
      measure: '(a) the same on the default dev server (20 reads/s)',
      figure: `${r.figure}, for the record`,
    }));
    return { rows, data: result.data };
  } finally {
    await env.close();
  }
}

main().catch((err) => {
  createLogger().error(err);
  process.exit(1);
});
