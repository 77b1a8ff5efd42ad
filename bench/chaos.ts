/**
 * `npm run chaos`: faults thrown at real nodes (`oz0 worker` processes) and a real dev server while jobs make
 * key-honouring writes to the example ledger, then the counts that matter, read on the servers' side:
 *
 * - node: a node killed (kill -9 of it and its servers) at a random moment, during plain calls and sessions;
 * - temporal: the Temporal dev server killed (kill -9) and started again on the same SQLite file;
 * - cancel: jobs cancelled at random moments, racing their calls' answers (a sandboxed call, then a plugin one);
 * - busy: 429 storms from a remote ledger, with Retry-After;
 * - partition: a node cut off from the server (SIGSTOP for longer than its heartbeat timeout, then SIGCONT): its
 *   calls go on elsewhere, and what its servers answered meanwhile (its late answers) must be ignored; a sandbox it
 *   started for a job whose call had answered may outlive the job (the job's end cannot reach the node): counted,
 *   not an early CANCELED, since no call runs in it;
 * - postgres (on the local cluster only, `--cluster`): PostgreSQL restarted, fast shutdown.
 *
 * With `--cluster` (what `npm run cluster -- --chaos` starts) it brings up the local cluster (deploy/local-cluster)
 * and throws the faults at it: `temporal` kills its real Temporal server instead of the dev server.
 * Every write that answered must be in the ledger exactly once, no key twice, no job lost, and no job may show
 * CANCELED while one of its calls still runs (its sandbox alive, or its plugin call not yet stopped): the temporal,
 * partition and postgres trials each cancel one more job around their fault, to count that there too.
 *
 *   npm run chaos -- [--short] [--trials 6] [--jobs 4] [--only node,temporal,cancel,busy,partition]
 *   npm run chaos -- --cluster [--short] [--observe] [--only …,postgres]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { CancelledFailure, Client, Connection, WorkflowFailedError } from '@temporalio/client';
import type { WorkflowHandle } from '@temporalio/client';
import { Command, Option } from 'commander';
import { z } from 'zod';
import { approveListing, readListing } from '../client/approve';
import { policyTargetOf } from '../common/policy-client';
import { readReceived } from '../examples/common';
import { startLedgerServer } from '../examples/ledger';
import { readKeyStore } from '../plugin';
import { parseConfig } from '../common/config';
import type { LoadedConfig } from '../common/config';
import { freePort, startDevServer } from '../worker/dev-server';
import type { DevServer } from '../worker/dev-server';
import { createLogger } from '../common/logger';
import { projectRoot } from '../common/paths';
import { findTemporalCli } from '../worker/temporal-cli';
import { callsOf } from '../model/job';
import type { JobTrace } from '../model/job';
import { startBusyProxy } from '../examples/busy-proxy';
import { listOption, machine, sleep, table, writeResults } from './common';
import type { Row } from './common';
import { descendants, killTree, processesIn, startWorker } from '../worker/processes';
import type { CallStep, JobSpec } from '../model/schemas';
import type { LocalCluster } from '../deploy/local-cluster';
import { clusterRun, onLocalCluster } from '../deploy/local-cluster/run';

const SCENARIOS = ['node', 'temporal', 'cancel', 'busy', 'partition', 'postgres'] as const;
type Scenario = (typeof SCENARIOS)[number];
/** Faults that need the local cluster: the dev server has no database of its own to restart. */
const CLUSTER_ONLY: readonly Scenario[] = ['postgres'];

const OptionsSchema = z.strictObject({
  short: z.boolean().default(false),
  trials: z.coerce.number().int().min(1).max(1000).optional(),
  jobs: z.coerce.number().int().min(1).max(100).optional(),
  only: listOption('scenario', SCENARIOS),
  cluster: z.boolean().default(false),
  observe: z.boolean().default(false),
});

interface Tally {
  trials: number;
  jobs: number;
  finished: number;
  cancelled: number;
  failed: number;
  lost: number;
  /** Jobs that showed CANCELED while one of their calls still ran. */
  canceledBeforeStopped: number;
  faults: number;
  /** Calls that answered "busy" on their last attempt (the storm outlasted their attempts). */
  gaveUpBusy: number;
  busyAnswers: number;
  /** Partition: calls a cut-off node's servers answered while it was stopped, and those the job took anyway. */
  lateAnswers: number;
  lateAccepted: number;
  /**
   * Partition: sandboxes of a cut-off node still alive when their job closed, their call answered before: no call
   * ran on, but the job's end could not reach that node, so its idle reaper (node.sandboxIdleSeconds) stops them.
   */
  leftToReaper: number;
}

/** The Temporal server the faults are thrown at: the dev server, or the local cluster's real one. */
interface ChaosServer {
  address: string;
  kind: string;
  /** kill -9, waiting for the exit. */
  kill(): Promise<void>;
  start(): Promise<void>;
  /** PostgreSQL: fast shutdown, `pauseMs` down, started again (the cluster only). */
  restartDatabase?(pauseMs: number): Promise<void>;
  close(): Promise<void>;
}

async function devServerChaos(dir: string, cli: string | undefined): Promise<ChaosServer> {
  const serverOpts = {
    cli,
    dbFile: path.join(dir, 'temporal.db'),
    port: await freePort(),
    uiPort: false as const,
    logFile: path.join(dir, 'temporal.log'),
  };
  let server: DevServer = await startDevServer(serverOpts);
  return {
    address: server.address,
    kind: 'dev server',
    async kill() {
      try {
        process.kill(-server.pid, 'SIGKILL');
      } catch {
        process.kill(server.pid, 'SIGKILL');
      }
      await server.exited;
    },
    async start() {
      server = await startDevServer(serverOpts);
    },
    close: () => server.stop(),
  };
}

function clusterChaos(cluster: LocalCluster): ChaosServer {
  return {
    address: cluster.address,
    kind: 'local cluster',
    kill: () => cluster.temporal.kill(),
    start: () => cluster.temporal.start(),
    async restartDatabase(pauseMs) {
      await cluster.postgres.stop();
      await sleep(pauseMs);
      await cluster.postgres.start();
    },
    // The cluster is its caller's to stop (onLocalCluster, in main).
    close: async () => undefined,
  };
}

export interface ChaosOptions {
  short?: boolean;
  trials?: number;
  jobs?: number;
  only?: Scenario[];
  /** Throw the faults at this cluster's Temporal server and PostgreSQL instead of a dev server of its own. */
  cluster?: LocalCluster;
}

type Settled =
  | { kind: 'completed'; trace: JobTrace }
  | { kind: 'cancelled' }
  | { kind: 'failed'; message: string }
  | { kind: 'lost' };

/** Alive and not a zombie, from /proc. */
function alive(pid: number): boolean {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

const random = (min: number, max: number) => min + Math.floor(Math.random() * (max - min));
/** The chaos nodes' heartbeat timeout: how long a node may be silent before its calls are taken as lost. */
const HEARTBEAT_TIMEOUT_S = 4;

async function main(): Promise<void> {
  const program = new Command('chaos')
    .description('faults thrown at real nodes and a real dev server; counts what was lost')
    .addOption(new Option('--short', 'a few trials of each, for CI'))
    .addOption(new Option('--trials <n>', 'trials of each scenario'))
    .addOption(new Option('--jobs <n>', 'jobs per trial'))
    .addOption(new Option('--only <scenarios>', `comma-separated: ${SCENARIOS.join(', ')}`))
    .addOption(new Option('--cluster', 'on the local cluster (deploy/local-cluster), brought up here; then down'))
    .addOption(new Option('--observe', "with --cluster: Jaeger receiving the nodes' spans and Prometheus too"))
    .parse();
  const parsed = OptionsSchema.safeParse(program.opts());
  if (!parsed.success) program.error(`chaos: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  const opts = parsed.data!;
  const { cluster: onCluster, observe, ...chaos } = opts;
  if (observe && !onCluster) program.error('chaos: --observe goes with --cluster');
  if (onCluster) {
    const run = clusterRun();
    const ok = await onLocalCluster(run, { nodes: 0, ui: false, observe }, (cluster) =>
      runChaos({ ...chaos, cluster }),
    );
    run.say('stopped');
    if (!ok) process.exitCode = 1;
    return;
  }
  const asked = program.opts().only !== undefined;
  const cut = chaos.only.filter((s) => CLUSTER_ONLY.includes(s));
  if (asked && cut.length > 0) program.error(`chaos: ${cut.join(', ')} needs the local cluster: --cluster`);
  if (!(await runChaos({ ...chaos, only: chaos.only.filter((s) => !CLUSTER_ONLY.includes(s)) }))) process.exitCode = 1;
}

/** Runs the trials and prints the table; true when nothing was lost, written twice or CANCELED early. */
export async function runChaos(opts: ChaosOptions): Promise<boolean> {
  const trials = opts.trials ?? (opts.short ? 2 : 6);
  const jobsPerTrial = opts.jobs ?? (opts.short ? 3 : 4);
  const only = opts.only ?? [...SCENARIOS];

  const root = projectRoot();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-chaos-'));
  const ledger = path.join(dir, 'ledger.db');
  const received = path.join(dir, 'received.jsonl');
  const cli = opts.cluster ? undefined : findTemporalCli();
  const server = opts.cluster ? clusterChaos(opts.cluster) : await devServerChaos(dir, cli);

  // The remote ledger runs here, behind a proxy that answers 429 to every tools/call while a storm is on.
  process.env.OZ0_RECEIVED_LOG = received;
  const remote = await startLedgerServer(0, { file: ledger });
  const storm = { on: false, answered: 0 };
  const proxy = await startBusyProxy(remote.url, (method) => {
    if (!storm.on || method !== 'tools/call') return undefined;
    storm.answered++;
    return String(random(0, 3));
  });

  const taskQueue = 'oz0-chaos';
  const serverEnv = { LEDGER_FILE: ledger, OZ0_RECEIVED_LOG: received };
  // The sandboxed ledger keeps a key store and a log of its own (I2: a plugin's files are never in a sandbox's view),
  // in a folder its sandbox may write; the counts read both.
  const boxDir = path.join(dir, 'box');
  fs.mkdirSync(boxDir, { mode: 0o777 });
  fs.chmodSync(boxDir, 0o777);
  const boxLedger = path.join(boxDir, 'ledger.db');
  const boxReceived = path.join(boxDir, 'received.jsonl');
  const allReceived = () =>
    [...readReceived(received), ...readReceived(boxReceived)].sort((a, b) => (a.t as number) - (b.t as number));
  const ledgerJs = path.join(root, 'dist', 'examples', 'ledger.js');
  const input = {
    temporal: { address: server.address, taskQueue },
    servers: {
      ledger: { command: 'node', args: [ledgerJs], env: serverEnv },
      box: {
        command: 'node',
        args: [ledgerJs],
        env: { LEDGER_FILE: boxLedger, OZ0_RECEIVED_LOG: boxReceived },
        sandbox: { read: ['dist', 'node_modules'], write: [boxDir] },
      },
      remote: { url: proxy.url },
    },
    tools: { '*': { timeoutSeconds: 30, maxAttempts: 5 } },
    // Live sessions (H8): a harness that makes the calls its input lists, the same ones again in a fresh run.
    harnesses: {
      writer: {
        command: 'node',
        args: [path.join(root, 'dist', 'bench', 'writer-harness.js')],
        tools: ['ledger.*', 'box.*'],
        timeoutSeconds: 300,
        sandbox: { read: ['dist', 'node_modules'] },
      },
    },
    node: { heartbeatTimeoutSeconds: HEARTBEAT_TIMEOUT_S, killGraceSeconds: 2, stateDir: path.join(dir, 'state') },
  };
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(file, JSON.stringify(input));
  const config: LoadedConfig = { ...parseConfig(input), baseDir: root, source: file };
  const logger = createLogger({ level: 'warn' });

  let connection = await Connection.connect({ address: server.address });
  let client = new Client({ connection });
  const workers: ChildProcess[] = [];
  let spare = 0;
  const names = new Map<ChildProcess, string>();
  const fresh = async () => {
    const name = `chaos-${++spare}`;
    const { proc } = await startWorker(file, name, workers);
    names.set(proc, name);
    return proc;
  };
  let nodes = [await fresh(), await fresh()];
  /** Nodes that died by themselves (not killed here) are replaced, and counted. */
  let nodesDied = 0;
  const keepTwoNodes = async () => {
    const dead = nodes.filter((n) => n.exitCode !== null || n.signalCode !== null);
    nodesDied += dead.length;
    nodes = nodes.filter((n) => !dead.includes(n));
    while (nodes.length < 2) nodes.push(await fresh());
  };

  const tallies = new Map<Scenario, Tally>();
  const expectedKeys = new Set<string>();
  const gaveUpKeys = new Set<string>();
  const violations: string[] = [];
  const tallyOf = (s: Scenario) => {
    let t = tallies.get(s);
    if (!t) {
      t = {
        trials: 0,
        jobs: 0,
        finished: 0,
        cancelled: 0,
        failed: 0,
        lost: 0,
        canceledBeforeStopped: 0,
        faults: 0,
        gaveUpBusy: 0,
        busyAnswers: 0,
        lateAnswers: 0,
        lateAccepted: 0,
        leftToReaper: 0,
      };
      tallies.set(s, t);
    }
    return t;
  };

  /** The job's outcome, asking again while the server is away; `lost` if it has not finished in `timeoutMs`. */
  const settle = async (h: WorkflowHandle, timeoutMs: number, onCancelled?: () => void): Promise<Settled> => {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      try {
        const trace = (await Promise.race([
          h.result(),
          new Promise((_, reject) => (timer = setTimeout(() => reject(new Error('waited')), deadline - Date.now()))),
        ])) as JobTrace;
        return { kind: 'completed', trace };
      } catch (err) {
        if (err instanceof WorkflowFailedError) {
          if (err.cause instanceof CancelledFailure) {
            onCancelled?.();
            return { kind: 'cancelled' };
          }
          return { kind: 'failed', message: err.cause?.message ?? err.message };
        }
        if (Date.now() >= deadline) return { kind: 'lost' };
        await sleep(500);
      } finally {
        clearTimeout(timer);
      }
    }
  };

  const count = (tally: Tally, id: string, s: Settled) => {
    if (s.kind === 'completed') {
      tally.finished++;
      for (const step of callsOf(s.trace)) {
        if (!step.result.isError) expectedKeys.add(step.key);
        else if (step.attempts.at(-1)?.outcome === 'busy') {
          tally.gaveUpBusy++;
          gaveUpKeys.add(step.key);
        }
      }
    } else if (s.kind === 'cancelled') tally.cancelled++;
    else if (s.kind === 'failed') {
      tally.failed++;
      violations.push(`${id} failed: ${s.message}`);
    } else {
      tally.lost++;
      violations.push(`${id} was lost`);
    }
  };

  const charge = (order: string, i: number, tool = 'ledger.slow_charge'): CallStep => ({
    call: tool,
    args: { order_id: `${order}-${i}`, amount: i + 1, ms: random(100, 700) },
  });
  const start = (id: string, spec: JobSpec) =>
    client.workflow.start('job', { taskQueue, workflowId: id, args: [spec] });
  /** A third of the jobs make plain calls, a third a scripted session, a third a live harness session. */
  const writes = (t: number, j: number, scenario: string): JobSpec => {
    const order = `${scenario}-t${t}-j${j}`;
    const steps = [charge(order, 0), charge(order, 1), charge(order, 2)];
    if (j % 3 === 1) return { tenant: 'chaos', steps };
    if (j % 3 === 0) return { tenant: 'chaos', steps: [{ session: steps }] };
    const calls = steps.map((s) => ({ tool: s.call, args: s.args ?? {} }));
    return { tenant: 'chaos', steps: [{ session: { harness: 'writer', input: { calls } } }] };
  };

  /** The node a partition trial cut off, until the next one: the end of its jobs could not reach it. */
  let cutOff: ChildProcess | undefined;

  /** A job of a sandboxed call then a plugin call, that a cancel will race: `c1` runs in the box, `c2` in the ledger. */
  const cancellable = (id: string) =>
    start(id, { tenant: 'chaos', steps: [charge(id, 0, 'box.slow_charge'), charge(id, 1, 'ledger.slow_charge')] });

  /** Settles a job that was (maybe) cancelled; a CANCELED seen while one of its calls still ran is counted. */
  const settleCancelled = async (tally: Tally, id: string, h: WorkflowHandle) => {
    // Read at the moment CANCELED is seen: a sandbox still alive now was alive when the job closed.
    let liveSandboxes: number[] = [];
    let unreachable = new Set<number>();
    const settled = await settle(h, 120_000, () => {
      // A sandbox's processes, seen from here: those working in its folder (their pids inside are its namespace's).
      const folder = `sandbox_box_${id.replace(/[^A-Za-z0-9_.-]/g, '_')}`;
      liveSandboxes = processesIn(path.join(dir, 'state', 'sandboxes'))
        .filter(alive)
        .filter((pid) => {
          try {
            return fs.readlinkSync(`/proc/${pid}/cwd`).includes(folder);
          } catch {
            return false;
          }
        });
      unreachable = new Set(cutOff ? descendants(cutOff.pid!) : []);
    });
    count(tally, id, settled);
    if (settled.kind !== 'cancelled') return;
    const closeTime = (await h.describe()).closeTime!.getTime();
    const records = allReceived().filter((r) => typeof r.key === 'string' && r.key.startsWith(`${id}/`));
    const ended = (s: Record<string, unknown>) =>
      records.some(
        (r) =>
          r.key === s.key &&
          r.instance === s.instance &&
          (r.event === 'answered' || r.event === 'cancelled') &&
          (r.t as number) >= (s.t as number) &&
          (r.t as number) <= closeTime,
      );
    // A cut-off node's sandbox whose call had ended: the job's end could not reach it (see Tally.leftToReaper).
    const left = liveSandboxes.filter(
      (pid) =>
        unreachable.has(pid) && records.some((r) => r.key === `${id}/c1` && r.pid === pid && !r.event && ended(r)),
    );
    tally.leftToReaper += left.length;
    liveSandboxes = liveSandboxes.filter((pid) => !left.includes(pid));
    // Every attempt that reached the plugin ledger answered or was stopped before the job closed.
    const pluginRunning = records.filter((r) => r.key === `${id}/c2` && !r.event).filter((s) => !ended(s));
    if (liveSandboxes.length > 0 || pluginRunning.length > 0) {
      tally.canceledBeforeStopped++;
      violations.push(
        `${id} showed CANCELED with ${liveSandboxes.length} sandbox(es) alive and ${pluginRunning.length} plugin call(s) running`,
      );
    }
  };

  /**
   * The write jobs of a trial plus one job cancelled at a random moment around the fault; `fault` is thrown once
   * they run. Every job is settled and counted, the cancelled one checked for an early CANCELED.
   */
  const faultTrial = async (
    scenario: Scenario,
    t: number,
    tally: Tally,
    fault: () => Promise<void>,
  ): Promise<Map<string, Settled>> => {
    const ids = Array.from({ length: jobsPerTrial }, (_, j) => `chaos-${scenario}-${process.pid}-${t}-${j}`);
    const handles = await Promise.all(ids.map((id, j) => start(id, writes(t, j, scenario))));
    const cancelId = `chaos-${scenario}-${process.pid}-${t}-x`;
    const cancelled = await cancellable(cancelId);
    tally.jobs++;
    const cancel = (async () => {
      await sleep(random(0, 4000));
      await cancelled.cancel().catch(() => undefined); // while the server or database may be away: retried below
    })();
    await sleep(random(200, 1500));
    await fault();
    tally.faults++;
    await cancel;
    const settled = new Map<string, Settled>();
    for (const [i, h] of handles.entries()) {
      settled.set(ids[i], await settle(h, 120_000));
      count(tally, ids[i], settled.get(ids[i])!);
    }
    await settleCancelled(tally, cancelId, cancelled);
    return settled;
  };

  const trial: Record<Scenario, (t: number, tally: Tally) => Promise<void>> = {
    async node(t, tally) {
      const ids = Array.from({ length: jobsPerTrial }, (_, j) => `chaos-node-${process.pid}-${t}-${j}`);
      const handles = await Promise.all(ids.map((id, j) => start(id, writes(t, j, 'node'))));
      await sleep(random(200, 1700));
      const victim = nodes[random(0, nodes.length)];
      killTree(victim.pid!);
      tally.faults++;
      nodes = nodes.filter((n) => n !== victim);
      await keepTwoNodes();
      for (const [i, h] of handles.entries()) count(tally, ids[i], await settle(h, 120_000));
    },

    async temporal(t, tally) {
      await faultTrial('temporal', t, tally, async () => {
        await server.kill();
        await sleep(random(500, 3000));
        await server.start();
        await keepTwoNodes();
      });
      await keepTwoNodes();
    },

    async postgres(t, tally) {
      await faultTrial('postgres', t, tally, () => server.restartDatabase!(random(500, 3000)));
      await keepTwoNodes();
    },

    async partition(t, tally) {
      let victim: ChildProcess | undefined;
      let stoppedAt = 0;
      cutOff = undefined;
      let resumedAt = 0;
      const settled = await faultTrial('partition', t, tally, async () => {
        victim = nodes[random(0, nodes.length)];
        cutOff = victim;
        stoppedAt = Date.now();
        process.kill(victim.pid!, 'SIGSTOP');
        // Past the heartbeat timeout: the server takes the node's calls as lost and runs them elsewhere.
        await sleep(HEARTBEAT_TIMEOUT_S * 1000 + random(1500, 4000));
        process.kill(victim.pid!, 'SIGCONT');
        resumedAt = Date.now();
      });
      cutOff = undefined;
      // Its servers kept running while it was stopped: what they answered then reached the node too late.
      const servers = new Set(descendants(victim!.pid!));
      // The plugin ledger's records (host pids); a sandbox's pids are its namespace's and are not compared here.
      const late = readReceived(received).filter(
        (r) =>
          r.event === 'answered' &&
          servers.has(r.pid as number) &&
          (r.t as number) >= stoppedAt &&
          (r.t as number) <= resumedAt &&
          [...settled.keys()].some((id) => String(r.key).startsWith(`${id}/`)),
      );
      tally.lateAnswers += late.length;
      for (const [id, s] of settled) {
        if (s.kind !== 'completed') continue;
        for (const r of late.filter((l) => String(l.key).startsWith(`${id}/`))) {
          // Taken, it would be the step's only attempt, made by the cut-off node in the session's first run.
          const step = callsOf(s.trace)
            .filter((st) => st.key === r.key)
            .at(-1);
          const accepted =
            step !== undefined &&
            step.node === names.get(victim!) &&
            (step.sessionRun ?? 1) === 1 &&
            !step.attempts.some((a) => a.outcome === 'lost' || a.outcome === 'timeout');
          if (accepted) {
            tally.lateAccepted++;
            violations.push(`${id}: the late answer of ${String(r.key)} was taken`);
          }
        }
      }
    },

    async cancel(t, tally) {
      const ids = Array.from({ length: jobsPerTrial }, (_, j) => `chaos-cancel-${process.pid}-${t}-${j}`);
      const handles = await Promise.all(
        ids.map((id) =>
          start(id, {
            tenant: 'chaos',
            steps: [charge(id, 0, 'box.slow_charge'), charge(id, 1, 'ledger.slow_charge')],
          }),
        ),
      );
      const cancels = handles.map(async (h) => {
        await sleep(random(0, 2200));
        tally.faults++;
        await h.cancel().catch(() => undefined); // it may have finished first: the race this is about
      });
      for (const [i, h] of handles.entries()) await settleCancelled(tally, ids[i], h);
      await Promise.all(cancels);
    },

    async busy(t, tally) {
      const ids = Array.from({ length: jobsPerTrial }, (_, j) => `chaos-busy-${process.pid}-${t}-${j}`);
      const before = storm.answered;
      let running = true;
      const storms = (async () => {
        // A storm from the first call on, then calm and storm in turns until every job is done.
        while (running) {
          storm.on = true;
          await sleep(random(300, 2500));
          storm.on = false;
          await sleep(random(100, 1200));
        }
      })();
      const handles = await Promise.all(
        ids.map((id) =>
          start(id, {
            tenant: 'chaos',
            steps: [0, 1, 2].map((i) => ({ call: 'remote.charge', args: { order_id: `${id}-${i}`, amount: i + 1 } })),
          }),
        ),
      );
      try {
        for (const [i, h] of handles.entries()) count(tally, ids[i], await settle(h, 120_000));
      } finally {
        running = false;
        await storms;
        storm.on = false;
      }
      tally.busyAnswers += storm.answered - before;
      tally.faults = tally.busyAnswers;
    },
  };

  try {
    if (only.includes('busy')) {
      await approveListing(policyTargetOf(config, client), 'chaos', await readListing(config, logger, 'remote'));
    }
    for (let t = 0; t < trials; t++) {
      for (const scenario of only) {
        const tally = tallyOf(scenario);
        tally.trials++;
        tally.jobs += jobsPerTrial;
        process.stderr.write(`chaos: ${scenario} trial ${t + 1}/${trials}\n`);
        await trial[scenario](t, tally);
        if (scenario === 'temporal' || scenario === 'postgres') {
          // The client's connection was to the server before: open a fresh one to the server now.
          await connection.close().catch(() => undefined);
          connection = await Connection.connect({ address: server.address });
          client = new Client({ connection });
        }
      }
    }
  } finally {
    for (const w of workers) if (w.exitCode === null && w.signalCode === null) killTree(w.pid!);
    await connection.close().catch(() => undefined);
    await proxy.close();
    await remote.close();
    await server.close();
  }

  // A key store keeps one record per key (its table says so): the plugin's and the remote ledger's, and the sandboxed
  // one's; a key in both would be a write made twice. What is checked here
  // is that every answered key is in it, and no key that gave up busy.
  const perKey = new Map<string, number>();
  for (const { key } of [...readKeyStore(ledger), ...(fs.existsSync(boxLedger) ? readKeyStore(boxLedger) : [])]) {
    perKey.set(key, (perKey.get(key) ?? 0) + 1);
  }
  const twice = [...perKey].filter(([, n]) => n > 1).map(([k]) => k);
  const missing = [...expectedKeys].filter((k) => !perKey.has(k));
  const gaveUpButWritten = [...gaveUpKeys].filter((k) => perKey.has(k));
  for (const k of twice) violations.push(`key ${k} written ${perKey.get(k)} times`);
  for (const k of missing) violations.push(`key ${k} answered but not in the ledger`);
  for (const k of gaveUpButWritten) violations.push(`key ${k} gave up busy but was written`);
  if (nodesDied > 0) violations.push(`${nodesDied} node(s) died by themselves`);

  const total = (f: keyof Tally) => [...tallies.values()].reduce((a, t) => a + t[f], 0);
  const faultName: Record<Scenario, string> = {
    node: 'nodes killed',
    temporal: 'Temporal server kills + restarts',
    cancel: 'cancels',
    busy: '429s sent',
    partition: 'nodes stopped past their heartbeat timeout',
    postgres: 'PostgreSQL restarts',
  };
  const keysOf = (s: Scenario) => [...perKey].filter(([k]) => k.startsWith(`chaos-${s}-`));
  const rows: Row[] = [...tallies].map(([s, t]) => ({
    measure: `${s}: ${t.trials} trials, ${t.jobs} jobs, ${t.faults} ${faultName[s]}`,
    figure:
      `${t.finished} finished, ${t.cancelled} cancelled, ${t.failed} failed, ${t.lost} lost; ` +
      `${keysOf(s).length} keys, ${keysOf(s).filter(([, n]) => n > 1).length} written twice` +
      (s === 'busy' ? `; ${t.gaveUpBusy} calls gave up busy` : `; ${t.canceledBeforeStopped} CANCELED early`) +
      (s === 'partition'
        ? `; ${t.lateAnswers} late answers, ${t.lateAccepted} taken; ${t.leftToReaper} idle sandboxes left to the reaper`
        : ''),
    met: t.failed === 0 && t.lost === 0 && t.canceledBeforeStopped === 0 && t.lateAccepted === 0,
  }));
  rows.push({
    measure: 'effects per key (ledger)',
    figure: `${perKey.size} keys written, ${twice.length} twice, ${missing.length} answered but missing, ${gaveUpButWritten.length} gave up but written`,
    target: 'exactly once',
    met: twice.length === 0 && missing.length === 0 && gaveUpButWritten.length === 0,
  });
  rows.push({
    measure: 'jobs',
    figure: `${total('jobs')} started, ${total('lost')} lost, ${total('canceledBeforeStopped')} CANCELED before their calls stopped`,
    target: '0 lost, 0',
    met: total('lost') === 0 && total('canceledBeforeStopped') === 0,
  });
  process.stdout.write(`machine: ${JSON.stringify(machine(cli))}\nTemporal: ${server.kind}\n${table(rows)}`);
  for (const v of violations) process.stdout.write(`violation: ${v}\n`);
  const out = writeResults(`chaos${opts.cluster ? '-cluster' : ''}${opts.short ? '-short' : ''}`, {
    machine: machine(cli),
    temporal: server.kind,
    trials,
    jobsPerTrial,
    tallies: Object.fromEntries(tallies),
    keysWritten: perKey.size,
    writtenTwice: twice,
    answeredButMissing: missing,
    gaveUpButWritten,
    nodesDied,
    violations,
  });
  process.stdout.write(`results: ${out}\n`);
  if (violations.length > 0) {
    process.stdout.write(`kept for a look: ${dir} (ledger, what the servers received, the server's log)\n`);
    return false;
  }
  fs.rmSync(dir, { recursive: true, force: true });
  return true;
}

if (require.main === module)
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
