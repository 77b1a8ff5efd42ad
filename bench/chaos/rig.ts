/**
 * What every chaos trial runs on: a Temporal server (./servers.ts), two `oz0 worker` nodes kept at two, the example
 * ledger as a plugin server, a sandboxed one and a remote one behind a proxy that answers 429 while a storm is on, and
 * a live-session harness that writes through them. It starts the jobs, settles them, and counts what it saw.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { CancelledFailure, Client, Connection, WorkflowFailedError } from '@temporalio/client';
import type { WorkflowHandle } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { startLedgerServer } from '../../examples/ledger';
import { startBusyProxy } from '../../examples/busy-proxy';
import { parseConfig } from '../../common/config';
import { processDataOf } from '../../data';
import type { LoadedConfig } from '../../common/config';
import { projectRoot } from '../../common/paths';
import { findTemporalCli } from '../../worker/temporal-cli';
import { descendants, killTree, processesIn, startWorker } from '../../worker/processes';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import type { CallStep, JobSpec } from '../../model/schemas';
import type { LocalCluster } from '../../deploy/local-cluster';
import { sleep } from '../common';
import { clusterChaos, devServerChaos } from './servers';
import type { ChaosServer } from './servers';

export const SCENARIOS = ['node', 'temporal', 'cancel', 'busy', 'partition', 'postgres', 'upgrade'] as const;
export type Scenario = (typeof SCENARIOS)[number];
/** N6: which release a node runs: this checkout's, or the previous release's (deploy/previous-release.ts). */
export type Release = 'this' | 'previous';
/** N6: the tenant whose calls wait for a person (the upgrade drill's), its policy `confirm` on the ledger. */
export const PEOPLE = 'people';

/** The chaos nodes' heartbeat timeout: how long a node may be silent before its calls are taken as lost. */
export const HEARTBEAT_TIMEOUT_S = 4;

export const random = (min: number, max: number) => min + Math.floor(Math.random() * (max - min));

export interface Tally {
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
  /** Upgrade: workflow tasks a node failed for nondeterminism (TMPRL1100), read from the jobs' histories. */
  nondeterministic: number;
  /** Upgrade: jobs whose tasks (workflow or activity) nodes of both releases ran, read from their histories. */
  crossed: number;
  /** Upgrade: calls that ended with an error result, by what it said (a session lost at a stop, under T4). */
  errorResults: Record<string, number>;
}

export function newTally(): Tally {
  return {
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
    nondeterministic: 0,
    crossed: 0,
    errorResults: {},
  };
}

/** One trial of a scenario: its jobs started, its fault thrown, every job settled and counted in `tally`. */
export type Trial = (rig: Rig, t: number, tally: Tally) => Promise<void>;

export type Settled =
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

/** A key-honouring write of the ledger: order `order`, line `i`, taking 100-700 ms. */
export function charge(order: string, i: number, tool = 'ledger.slow_charge'): CallStep {
  return { call: tool, args: { order_id: `${order}-${i}`, amount: i + 1, ms: random(100, 700) } };
}

const TASK_QUEUE = 'oz0-chaos';

export class Rig {
  /** The run's files: the ledgers, what the servers received, the config, the server's log, the nodes' state. */
  readonly ledger: string;
  readonly received: string;
  // The sandboxed ledger keeps a key store and a log of its own (I2: a plugin's files are never in a sandbox's view),
  // in a folder its sandbox may write; the counts read both.
  readonly boxDir: string;
  readonly boxLedger: string;
  readonly boxReceived: string;
  readonly configFile: string;
  /** N6 (the upgrade drill): the previous release's config, what its nodes take (it knows no field of this one's). */
  readonly previousConfigFile: string;
  /** Which release each node runs. */
  readonly releases = new Map<ChildProcess, Release>();
  /** The remote ledger's proxy answers 429 to every tools/call while this is on, and counts them. */
  readonly storm = { on: false, answered: 0 };
  readonly workers: ChildProcess[] = [];
  /** The nodes running now, kept at two; their names, for a step's `node`. */
  nodes: ChildProcess[] = [];
  readonly names = new Map<ChildProcess, string>();
  /** Nodes that died by themselves (not killed here) are replaced, and counted. */
  nodesDied = 0;
  /** The node a partition trial cut off, until the next one: the end of its jobs could not reach it. */
  cutOff?: ChildProcess;
  /** Keys of writes that answered (each must be in a ledger once), and of calls that gave up busy (none may be). */
  readonly expectedKeys = new Set<string>();
  readonly gaveUpKeys = new Set<string>();
  readonly violations: string[] = [];
  config!: LoadedConfig;
  client!: Client;
  private connection!: Connection;
  private spare = 0;
  private closers: Array<() => Promise<void>> = [];

  private constructor(
    readonly dir: string,
    readonly server: ChaosServer,
    readonly cli: string | undefined,
    readonly jobsPerTrial: number,
    /** N6: the previous release's folder, for the upgrade drill; its nodes run from there. */
    readonly previous?: string,
  ) {
    this.ledger = path.join(dir, 'ledger.db');
    this.received = path.join(dir, 'received.jsonl');
    this.boxDir = path.join(dir, 'box');
    this.boxLedger = path.join(this.boxDir, 'ledger.db');
    this.boxReceived = path.join(this.boxDir, 'received.jsonl');
    this.configFile = path.join(dir, 'oz0.config.json');
    this.previousConfigFile = path.join(dir, 'oz0.previous.config.json');
  }

  /** Starts the servers, writes the config and starts two nodes. */
  static async open(opts: { cluster?: LocalCluster; jobsPerTrial: number; previous?: string }): Promise<Rig> {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-chaos-'));
    const cli = opts.cluster ? undefined : findTemporalCli();
    const server = opts.cluster ? clusterChaos(opts.cluster) : await devServerChaos(dir, cli);
    const rig = new Rig(dir, server, cli, opts.jobsPerTrial, opts.previous);
    await rig.boot();
    return rig;
  }

  private async boot(): Promise<void> {
    const root = projectRoot();
    // The remote ledger runs here, behind a proxy that answers 429 to every tools/call while a storm is on.
    process.env.OZ0_RECEIVED_LOG = this.received;
    const remote = await startLedgerServer(0, { file: this.ledger });
    const proxy = await startBusyProxy(remote.url, (method) => {
      if (!this.storm.on || method !== 'tools/call') return undefined;
      this.storm.answered++;
      return String(random(0, 3));
    });
    this.closers.push(
      () => proxy.close(),
      () => remote.close(),
    );
    fs.mkdirSync(this.boxDir, { mode: 0o777 });
    fs.chmodSync(this.boxDir, 0o777);
    const ledgerJs = path.join(root, 'dist', 'examples', 'ledger.js');
    // The project's code, by absolute path: a config's relative paths are its own folder's (this run's, under /tmp),
    // where the sandboxed ledger and the writer harness found nothing and could not start.
    const projectReads = [path.join(root, 'dist'), path.join(root, 'node_modules')];
    const input = {
      temporal: { address: this.server.address, taskQueue: TASK_QUEUE },
      servers: {
        ledger: {
          command: 'node',
          args: [ledgerJs],
          env: { LEDGER_FILE: this.ledger, OZ0_RECEIVED_LOG: this.received },
        },
        box: {
          command: 'node',
          args: [ledgerJs],
          env: { LEDGER_FILE: this.boxLedger, OZ0_RECEIVED_LOG: this.boxReceived },
          sandbox: { read: projectReads, write: [this.boxDir] },
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
          sandbox: { read: projectReads },
        },
      },
      node: {
        heartbeatTimeoutSeconds: HEARTBEAT_TIMEOUT_S,
        killGraceSeconds: 2,
        stateDir: path.join(this.dir, 'state'),
      },
    };
    let config: object = input;
    if (this.previous) {
      // N6: both releases' nodes share the task queues; the previous release's take its own config's fields, and this
      // release's nodes write nothing that release could not run after them (docs/deploy.md, "Rolling back").
      // The example reader too, whose echo gives a big answer back.
      const reader = { command: 'node', args: [path.join(root, 'dist', 'examples', 'reader.js')] };
      const previous = {
        ...input,
        servers: { ...input.servers, reader },
        tenants: { [PEOPLE]: { policy: { 'ledger.*': 'confirm' } } },
        // A job of 6 calls continues as new mid-way (after 4), so a run's hand-over meets the other release too.
        jobs: { continueAsNewAfterCalls: 4 },
      };
      fs.writeFileSync(this.previousConfigFile, JSON.stringify(previous));
      config = {
        ...previous,
        upgrade: { rollbackSafe: true },
        payloads: { store: 'off', seal: { newPayloads: 'plain' } },
      };
    }
    fs.writeFileSync(this.configFile, JSON.stringify(config));
    this.config = { ...parseConfig(config), baseDir: root, source: this.configFile };
    this.connection = await Connection.connect({ address: this.server.address });
    this.client = this.newClient();
    this.nodes = [await this.fresh(), await this.fresh()];
  }

  /** A client of the nodes' own data converter: it opens what they seal (D4) and reads big answers from their store. */
  private newClient(): Client {
    const data = processDataOf(this.config);
    const client = new Client({ connection: this.connection, dataConverter: data.dataConverter });
    data.useClient(client);
    return client;
  }

  /** The client's connection was to the server before a restart: a fresh one to the server now. */
  async reconnect(): Promise<void> {
    await this.connection.close().catch(() => undefined);
    this.connection = await Connection.connect({ address: this.server.address });
    this.client = this.newClient();
  }

  /** Stops the nodes and the servers; the run's files stay for the counts. */
  async close(): Promise<void> {
    for (const w of this.workers) if (w.exitCode === null && w.signalCode === null) killTree(w.pid!);
    await this.connection.close().catch(() => undefined);
    for (const close of this.closers) await close();
    await this.server.close();
  }

  /** A new node, named in order; of this release unless the previous one is asked for. */
  async fresh(release: Release = 'this'): Promise<ChildProcess> {
    const name = `chaos-${++this.spare}${release === 'previous' ? '-previous' : ''}`;
    const { proc } = await startWorker(
      release === 'previous' ? this.previousConfigFile : this.configFile,
      name,
      this.workers,
      // The drill keeps each node's log: a failed workflow task is found there by name.
      this.previous ? { logFile: path.join(this.dir, 'nodes', `${name}.log`), root: this.previousRoot(release) } : {},
    );
    this.names.set(proc, name);
    this.releases.set(proc, release);
    return proc;
  }

  private previousRoot(release: Release): string | undefined {
    if (release === 'this') return undefined;
    if (!this.previous) throw new Error('the rig was opened without the previous release');
    return this.previous;
  }

  /**
   * N6: each node not of `release` replaced by one that is, one at a time, as an operator deploys: the new node
   * first, then the old one stopped with SIGTERM (its running calls end within its grace, its sessions go on
   * elsewhere), waited for, and killed only if it outlasts both graces.
   */
  async replaceNodes(release: Release): Promise<void> {
    for (const old of [...this.nodes]) {
      if (this.releases.get(old) === release) continue;
      const next = await this.fresh(release);
      this.nodes = [...this.nodes.filter((n) => n !== old), next];
      const exited = new Promise<void>((resolve) => {
        if (old.exitCode !== null || old.signalCode !== null) resolve();
        else old.once('exit', () => resolve());
      });
      old.kill('SIGTERM');
      const timer = setTimeout(() => killTree(old.pid!), 30_000);
      await exited;
      clearTimeout(timer);
    }
  }

  async keepTwoNodes(): Promise<void> {
    const dead = this.nodes.filter((n) => n.exitCode !== null || n.signalCode !== null);
    this.nodesDied += dead.length;
    this.nodes = this.nodes.filter((n) => !dead.includes(n));
    while (this.nodes.length < 2) this.nodes.push(await this.fresh());
  }

  /** What both ledgers received, in time order. */
  allReceived(): Array<Record<string, unknown>> {
    return [...readReceived(this.received), ...readReceived(this.boxReceived)].sort(
      (a, b) => (a.t as number) - (b.t as number),
    );
  }

  start(id: string, spec: JobSpec): Promise<WorkflowHandle> {
    return this.client.workflow.start('job', { taskQueue: TASK_QUEUE, workflowId: id, args: [spec] });
  }

  /** A third of the jobs make plain calls, a third a scripted session, a third a live harness session. */
  writes(t: number, j: number, scenario: string): JobSpec {
    const order = `${scenario}-t${t}-j${j}`;
    const steps = [charge(order, 0), charge(order, 1), charge(order, 2)];
    if (j % 3 === 1) return { tenant: 'chaos', steps };
    if (j % 3 === 0) return { tenant: 'chaos', steps: [{ session: steps }] };
    const calls = steps.map((s) => ({ tool: s.call, args: s.args ?? {} }));
    return { tenant: 'chaos', steps: [{ session: { harness: 'writer', input: { calls } } }] };
  }

  /** A job of a sandboxed call then a plugin call, that a cancel will race: `c1` runs in the box, `c2` in the ledger. */
  cancellable(id: string): Promise<WorkflowHandle> {
    return this.start(id, {
      tenant: 'chaos',
      steps: [charge(id, 0, 'box.slow_charge'), charge(id, 1, 'ledger.slow_charge')],
    });
  }

  /** The job's outcome, asking again while the server is away; `lost` if it has not finished in `timeoutMs`. */
  async settle(h: WorkflowHandle, timeoutMs: number, onCancelled?: () => void): Promise<Settled> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      let timer: NodeJS.Timeout | undefined;
      // A wait that loses the race is abandoned: aborted, so no retry of its long poll outlives it (or the client).
      const abandon = new AbortController();
      try {
        const result = this.client.withAbortSignal(abandon.signal, () => h.result());
        result.catch(() => undefined);
        const trace = (await Promise.race([
          result,
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
        abandon.abort();
      }
    }
  }

  count(tally: Tally, id: string, s: Settled): void {
    if (s.kind === 'completed') {
      tally.finished++;
      for (const step of callsOf(s.trace)) {
        if (!step.result.isError) this.expectedKeys.add(step.key);
        else if (step.attempts.at(-1)?.outcome === 'busy') {
          tally.gaveUpBusy++;
          this.gaveUpKeys.add(step.key);
        }
      }
    } else if (s.kind === 'cancelled') tally.cancelled++;
    else if (s.kind === 'failed') {
      tally.failed++;
      this.violations.push(`${id} failed: ${s.message}`);
    } else {
      tally.lost++;
      this.violations.push(`${id} was lost`);
    }
  }

  /** Settles a job that was (maybe) cancelled; a CANCELED seen while one of its calls still ran is counted. */
  async settleCancelled(tally: Tally, id: string, h: WorkflowHandle): Promise<void> {
    // Read at the moment CANCELED is seen: a sandbox still alive now was alive when the job closed.
    let liveSandboxes: number[] = [];
    let unreachable = new Set<number>();
    const settled = await this.settle(h, 120_000, () => {
      // A sandbox's processes, seen from here: those working in its folder (their pids inside are its namespace's).
      const folder = `sandbox_box_${id.replace(/[^A-Za-z0-9_.-]/g, '_')}`;
      liveSandboxes = processesIn(path.join(this.dir, 'state', 'sandboxes'))
        .filter(alive)
        .filter((pid) => {
          try {
            return fs.readlinkSync(`/proc/${pid}/cwd`).includes(folder);
          } catch {
            return false;
          }
        });
      unreachable = new Set(this.cutOff ? descendants(this.cutOff.pid!) : []);
    });
    this.count(tally, id, settled);
    if (settled.kind !== 'cancelled') return;
    const closeTime = (await h.describe()).closeTime!.getTime();
    const records = this.allReceived().filter((r) => typeof r.key === 'string' && r.key.startsWith(`${id}/`));
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
      this.violations.push(
        `${id} showed CANCELED with ${liveSandboxes.length} sandbox(es) alive and ${pluginRunning.length} plugin call(s) running`,
      );
    }
  }

  /**
   * The write jobs of a trial plus one job cancelled at a random moment around the fault; `fault` is thrown once
   * they run. Every job is settled and counted, the cancelled one checked for an early CANCELED.
   */
  async faultTrial(
    scenario: Scenario,
    t: number,
    tally: Tally,
    fault: () => Promise<void>,
  ): Promise<Map<string, Settled>> {
    const ids = Array.from({ length: this.jobsPerTrial }, (_, j) => `chaos-${scenario}-${process.pid}-${t}-${j}`);
    const handles = await Promise.all(ids.map((id, j) => this.start(id, this.writes(t, j, scenario))));
    const cancelId = `chaos-${scenario}-${process.pid}-${t}-x`;
    const cancelled = await this.cancellable(cancelId);
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
      settled.set(ids[i], await this.settle(h, 120_000));
      this.count(tally, ids[i], settled.get(ids[i])!);
    }
    await this.settleCancelled(tally, cancelId, cancelled);
    return settled;
  }
}
