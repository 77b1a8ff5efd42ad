/**
 * D7: what carrying answers costs, in one run.
 * - A 10 MiB answer's way through oz0's payload path — kept in the store by its call (Temporal's JSON, oz0's codecs,
 *   the store's put under its SHA-256) and read back whole (the store's get, the digest checked, the codecs, the JSON)
 *   — against the store's own put and get of the same bytes: on the folder store and, where SeaweedFS is built, on its
 *   S3 API. And the same answer's whole call, a node making it and a client reading it back, for the record.
 * - A small call (under every threshold) with the store on against the store off: sequential calls of one job.
 * - D4's cost: the same small calls sealed against plain, and a 10 MiB answer's whole call sealed against plain.
 * - A node's peak memory during 20 calls of 10 MiB at once (an `oz0 worker` process) against a bare Temporal worker
 *   process making the same calls, its results on Temporal's External Storage in a folder: the growth of each over
 *   its idle size, beside the answers' own bytes.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { cpuSeconds, fixed, percentile, sleep } from '../common';
import type { Row } from '../common';
import { benchConfig, startBareProcess, withNode, writeBenchConfig } from '../env';
import type { BenchEnv } from '../env';
import { processDataOf } from '../../data';
import type { ProcessData } from '../../data';
import { pageText } from '../../examples/pages';
import { connectJobClient, jobTrace, startJob } from '../../client/jobs';
import { seaweedfsBinary, startSeaweedfs } from '../../deploy/local-cluster/seaweedfs';
import type { RunningS3 } from '../../deploy/local-cluster/seaweedfs';
import { killTree, startWorker } from '../../worker/processes';
import type { LoadedConfig } from '../../common/config';

export interface AnswersOptions {
  /** Rounds of each timing (the median is quoted). */
  rounds: number;
  /** Sequential small calls per job, and rounds of jobs, of the store on/off comparison. */
  smallCalls: number;
  smallRounds: number;
  /** Calls of 10 MiB at once for the memory figure. */
  concurrent: number;
}

const MiB = 1024 * 1024;
const ANSWER_KIB = 10 * 1024;

/** The median of `rounds` timings of `fn`, in ms, after one warm-up. */
async function median(rounds: number, fn: () => Promise<void>): Promise<number> {
  await fn();
  const times: number[] = [];
  for (let i = 0; i < rounds; i++) {
    const t0 = performance.now();
    await fn();
    times.push(performance.now() - t0);
  }
  return percentile(times, 50);
}

/**
 * The payload path against the store's own put and get, for one store: a fresh answer each round (the store is
 * content addressed: the same answer again is not put again), and the same bytes put and got under a key of their own.
 */
async function payloadPath(data: ProcessData, rounds: number, at: { jobId: string; tenant: string }) {
  const text = pageText(ANSWER_KIB * 1024, 7);
  const answers = Array.from({ length: rounds + 1 }, (_, i) => ({
    isError: false,
    content: [{ type: 'text', text: `${i} ${text.slice(String(i).length + 1)}` }],
  }));
  const bytes = Buffer.byteLength(JSON.stringify(answers[0]));
  let a = 0;
  const oz0 = await median(rounds, async () => {
    const answer = answers[a++];
    const kept = await data.answers.keep(answer, at, bytes);
    const whole = await data.answers.read(kept, at);
    if ((whole.content[0] as { text: string }).text.length !== text.length) throw new Error('short');
  });
  const raws = answers.map((answer) => Buffer.from(JSON.stringify(answer)));
  const { client, bucket } = data.store!.objects;
  let n = 0;
  const store = await median(rounds, async () => {
    const raw = raws[n];
    const key = `bench/raw-${process.pid}-${n++}`;
    await client.putObject(bucket, key, raw);
    const got = await client.getObject(bucket, key);
    if (got.length !== raw.length) throw new Error('short');
  });
  return { oz0, store, bytes };
}

function s3Settings(s3: RunningS3) {
  return {
    store: {
      s3: {
        bucket: s3.bucket,
        endpoint: s3.endpoint,
        accessKeyId: 'env:OZ0_BENCH_S3_KEY',
        secretAccessKey: 'env:OZ0_BENCH_S3_SECRET',
      },
    },
  };
}

/** The whole call: a node makes it, a client reads its answer back whole. */
async function wholeCall(env: BenchEnv, config: LoadedConfig, rounds: number): Promise<number> {
  const jc = await connectJobClient(config);
  try {
    return await withNode(env, config, () =>
      median(rounds, async () => {
        const handle = await startJob(jc, {
          tenant: 'bench',
          steps: [{ call: 'pages.read_page', args: { kib: ANSWER_KIB, seed: 9 } }],
        });
        await handle.result();
        const trace = await jobTrace(jc.client, handle.workflowId, { data: jc.data, whole: true });
        if (!trace.steps.length) throw new Error('no step');
      }),
    );
  } finally {
    await jc.close();
  }
}

type Way = 'on' | 'off';

/**
 * Sequential small calls, the store on and off: two `oz0 worker` processes up at once, a job of `calls` on each in
 * turn (who goes first alternating). Per call: the wall time, and each worker's CPU (from /proc, its servers apart),
 * which the machine's other work moves far less. Half the rounds with the `on` worker started first, half with it
 * started second: two workers of one config differ by as much as 2.5 % by their start alone (an A/A run). The
 * figures are the medians of the rounds' ratios.
 */
async function smallCalls(
  env: BenchEnv,
  calls: number,
  rounds: number,
  name: string,
  extra: Record<Way, Record<string, unknown>>,
) {
  const steps = Array.from({ length: calls }, (_, i) => ({ call: 'reader.echo', args: { text: `t${i}` } }));
  const wall: number[] = [];
  const cpu: number[] = [];
  for (const [half, started] of [['a', ['on', 'off']] as const, ['b', ['off', 'on']] as const]) {
    const workers: ChildProcess[] = [];
    const procs = {} as Record<Way, ChildProcess>;
    const clients = {} as Record<Way, Awaited<ReturnType<typeof connectJobClient>>>;
    try {
      for (const way of started) {
        const queue = `answers-${name}-${way}-${half}`;
        procs[way] = (await startWorker(writeBenchConfig(env, queue, extra[way]), `bench-${queue}`, workers)).proc;
        clients[way] = await connectJobClient(benchConfig(env, queue, extra[way]));
      }
      for (let r = 0; r <= rounds / 2; r++) {
        const round = {} as Record<Way, { wall: number; cpu: number }>;
        for (const way of r % 2 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
          const cpu0 = cpuSeconds(procs[way].pid!);
          const t0 = performance.now();
          await (await startJob(clients[way], { tenant: 'bench', steps })).result();
          const ms = performance.now() - t0;
          round[way] = { wall: ms / calls, cpu: ((cpuSeconds(procs[way].pid!) - cpu0) * 1000) / calls };
        }
        // The first round warms both up.
        if (r === 0) continue;
        wall.push(round.on.wall / round.off.wall);
        cpu.push(round.on.cpu / round.off.cpu);
      }
    } finally {
      for (const way of started) await clients[way]?.close();
      for (const proc of workers) killTree(proc.pid!);
    }
  }
  return { wall: percentile(wall, 50), cpu: percentile(cpu, 50) };
}

/** A field of /proc/<pid>/status in MiB. */
function statusMiB(pid: number, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

/** Idle and peak resident size of a worker process while `run` makes its calls. */
async function footprint(pid: number, run: () => Promise<void>): Promise<{ idleMiB: number; peakMiB: number }> {
  await sleep(2000);
  const idleMiB = statusMiB(pid, 'VmRSS');
  await run();
  return { idleMiB, peakMiB: statusMiB(pid, 'VmHWM') };
}

async function memory(env: BenchEnv, concurrent: number) {
  const pages = path.join(env.root, 'dist', 'examples', 'pages.js');
  const workers: ChildProcess[] = [];
  const extra = { servers: { pages: { command: 'node', args: [pages] } }, node: { slots: concurrent + 10 } };
  const file = writeBenchConfig(env, 'answers-memory', extra);
  const { proc } = await startWorker(file, 'bench-answers-memory', workers);
  let oz0: { idleMiB: number; peakMiB: number };
  // The worker's own config, as its CLI reads it: the same store.
  const jc = await connectJobClient(benchConfig(env, 'answers-memory', extra));
  try {
    oz0 = await footprint(proc.pid!, async () => {
      const handles = await Promise.all(
        Array.from({ length: concurrent }, (_, i) =>
          startJob(jc, { tenant: 'bench', steps: [{ call: 'pages.read_page', args: { kib: ANSWER_KIB, seed: i } }] }),
        ),
      );
      await Promise.all(handles.map((h) => h.result()));
    });
  } finally {
    await jc.close();
    killTree(proc.pid!);
  }
  const store = path.join(env.dir, 'bare-store');
  const bare = await startBareProcess(env, 'answers-memory-bare', {
    slots: concurrent + 10,
    server: pages,
    store,
  });
  let baseline: { idleMiB: number; peakMiB: number };
  try {
    baseline = await footprint(bare.pid!, async () => {
      const handles = await Promise.all(
        Array.from({ length: concurrent }, (_, i) =>
          env.client.workflow.start('bareReadJob', {
            taskQueue: 'answers-memory-bare',
            workflowId: env.id('bare-read'),
            args: [ANSWER_KIB, i],
          }),
        ),
      );
      await Promise.all(handles.map((h) => h.result()));
    });
  } finally {
    killTree(bare.pid!);
  }
  return { oz0, bare: baseline };
}

export async function measureAnswers(env: BenchEnv, opts: AnswersOptions) {
  const rows: Row[] = [];
  const pages = path.join(env.root, 'dist', 'examples', 'pages.js');
  const folderConfig = benchConfig(env, 'answers-folder', { servers: { pages: { command: 'node', args: [pages] } } });
  const at = { jobId: env.id('answers-path'), tenant: 'bench' };
  const folder = await payloadPath(processDataOf(folderConfig), opts.rounds, at);
  rows.push({
    measure: 'D7 10 MiB answer through oz0, folder store (keep + read)',
    figure: `${fixed(folder.oz0, 1)} ms / ${fixed(folder.store, 1)} ms = ${fixed(folder.oz0 / folder.store, 2)}×`,
    target: '≤ 1.5× the store’s own put + get',
    met: folder.oz0 / folder.store <= 1.5,
  });
  let s3Figures: { oz0: number; store: number } | undefined;
  let callMs: number | undefined;
  const weed = seaweedfsBinary(env.root);
  if (fs.existsSync(weed)) {
    const s3 = await startSeaweedfs(weed, path.join(env.dir, 's3'));
    process.env.OZ0_BENCH_S3_KEY = s3.accessKeyId;
    process.env.OZ0_BENCH_S3_SECRET = s3.secretAccessKey;
    try {
      const s3Config = benchConfig(env, 'answers-s3', {
        servers: { pages: { command: 'node', args: [pages] } },
        payloads: s3Settings(s3),
      });
      s3Figures = await payloadPath(processDataOf(s3Config), opts.rounds, at);
      rows.push({
        measure: 'D7 10 MiB answer through oz0, S3 store (SeaweedFS)',
        figure: `${fixed(s3Figures.oz0, 1)} ms / ${fixed(s3Figures.store, 1)} ms = ${fixed(s3Figures.oz0 / s3Figures.store, 2)}×`,
        target: '≤ 1.5× the store’s own put + get',
        met: s3Figures.oz0 / s3Figures.store <= 1.5,
      });
      callMs = await wholeCall(env, s3Config, opts.rounds);
      rows.push({
        measure: 'D7 a call of 10 MiB, made and read back whole (S3)',
        figure: `${fixed(callMs, 0)} ms (${fixed(callMs / s3Figures.store, 1)}× the store's put + get)`,
      });
    } finally {
      await s3.stop();
    }
  } else {
    rows.push({ measure: 'D7 S3 store', figure: 'not measured: no SeaweedFS (npm run s3:install builds it)' });
  }
  const small = await smallCalls(env, opts.smallCalls, opts.smallRounds, 'small', {
    on: {},
    off: { payloads: { store: 'off' } },
  });
  rows.push({
    measure: 'D7 a small call, the store on / off',
    figure: `wall ${fixed(small.wall, 3)}×, the node's CPU ${fixed(small.cpu, 3)}× (medians of the rounds' ratios)`,
    target: '≤ 1.02×',
    met: small.wall <= 1.02,
  });
  // D4's cost: the same small calls sealed and plain (the plain worker still opens what the sealed one sealed).
  const plain = { payloads: { seal: { folder: env.keys, newPayloads: 'plain' } } };
  const sealedSmall = await smallCalls(env, opts.smallCalls, opts.smallRounds, 'sealed', { on: {}, off: plain });
  rows.push({
    measure: 'D7 a small call, sealed / plain',
    figure: `wall ${fixed(sealedSmall.wall, 3)}×, the node's CPU ${fixed(sealedSmall.cpu, 3)}× (medians of the rounds' ratios)`,
    target: '≤ 1.03×',
    met: sealedSmall.wall <= 1.03,
  });
  // And a 10 MiB answer, made and read back whole (folder store), sealed against plain, alternating.
  const bigConfig = (way: Way) =>
    benchConfig(env, `answers-big-${way}`, {
      servers: { pages: { command: 'node', args: [pages] } },
      ...(way === 'off' ? plain : {}),
    });
  const big: Record<Way, number[]> = { on: [], off: [] };
  for (let r = 0; r < 2; r++) {
    for (const way of r % 2 ? (['off', 'on'] as const) : (['on', 'off'] as const)) {
      big[way].push(await wholeCall(env, bigConfig(way), opts.rounds));
    }
  }
  const bigSealed = percentile(big.on, 50);
  const bigPlain = percentile(big.off, 50);
  rows.push({
    measure: 'D7 a call of 10 MiB made and read back whole, sealed / plain (folder store)',
    figure: `${fixed(bigSealed, 0)} ms / ${fixed(bigPlain, 0)} ms = ${fixed(bigSealed / bigPlain, 3)}×`,
    target: '≤ 1.1×',
    met: bigSealed / bigPlain <= 1.1,
  });
  const mem = await memory(env, opts.concurrent);
  const answersMiB = (opts.concurrent * ANSWER_KIB) / 1024;
  const grew = mem.oz0.peakMiB - mem.oz0.idleMiB;
  const bareGrew = mem.bare.peakMiB - mem.bare.idleMiB;
  rows.push({
    measure: `D7 peak memory, ${opts.concurrent} calls of 10 MiB at once (growth over idle)`,
    figure: `oz0 +${fixed(grew, 0)} MiB, bare +${fixed(bareGrew, 0)} MiB (answers: ${fixed(answersMiB, 0)} MiB)`,
    target: `≤ bare + 60 MiB + the answers once`,
    met: grew <= bareGrew + 60 + answersMiB,
  });
  return {
    rows,
    data: {
      folder,
      s3: s3Figures,
      callMs,
      small,
      sealed: { small: sealedSmall, bigMs: { sealed: bigSealed, plain: bigPlain } },
      memory: mem,
      answersMiB,
      bytes: folder.bytes / MiB,
    },
  };
}
