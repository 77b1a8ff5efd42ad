/**
 * One node: a worker process with three Temporal workers — the shared queue (jobs and their calls), the node's
 * own queue (its sandboxes and sessions) and the namespace's policy queue (tenants' policy workflows) — over one
 * server pool; the two that run workflows share one workflow thread.
 */
import { setMaxListeners } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { NativeConnection, Runtime, Worker } from '@temporalio/worker';
import type { WorkerOptions } from '@temporalio/worker';
import { createActivities } from '../activities';
import type { NodeIdentity } from '../activities';
import { ServerPool } from '../activities/pool';
import { Isolation } from '../activities/sandbox';
import { launchProblems } from '../activities/launch';
import { installPackages } from '../activities/packages';
import { PolicyGate } from '../activities/policy/gate';
import { CallRelay } from '../activities/call/relay';
import { JobFollows } from '../activities/call/job-follows';
import { Gateway } from '../activities/harness/gateway';
import { policyTargetOf } from '../common/policy-client';
import { ALL_TENANTS } from '../model/policy-rules';
import { Client } from '@temporalio/client';
import type { LoadedConfig } from '../common/config';
import { workflowBuildId, workflowBundle } from './bundle';
import { readRelease, releaseLabels, releaseText } from '../common/release';
import type { NodeRelease } from '../common/release';
import { SharedWorkflowThread } from './workflow-thread';
import { assertReachable, connectionOptions, temporalUnreachable } from '../common/connection';
import { TemporalLevelFilter, TemporalPinoLogger } from '../common/logger';
import type { Logger } from '../common/logger';
import { ensureSearchAttributes } from './search-attributes';
import { provideNodeBwrap } from './bubblewrap';
import {
  flushTracing,
  prepareRuntimeMetrics,
  runtimeMetricsOptions,
  serveMetrics,
  startTracing,
  tracingClientInterceptors,
  tracingOn,
  tracingWorkerOptions,
} from './telemetry';
import { CancelRoute } from '../activities/heartbeats';
import { findCancelWay } from './cancel-way';
import { completionsSent } from '../activities/call/durable';
import { EndedJobs, RunningHarnesses } from '../activities/ended-jobs';
import { claimFolder, stopLeftovers } from '../activities/sandbox/leftovers';
import { ShareGate } from '../activities/policy/shares';
import { SlotCounter } from '../activities/slots';
import { readOrigins } from '../common/policy-client';
import { reserveOf, sharesSeedOf } from '../common/config';
import { sharedQueues } from '../common/shares-client';
import { sharesOf } from '../model/policy-rules';
import { configDifferences } from '../model/origins';
import { FAIRNESS_SAID, WeightKeeper, probeFairness } from './fairness';
import { processDataOf, sweepEveryHour } from '../data';
import { StuckWatch } from './stuck';
import { answerBoundOf } from '../activities/call/answer';
import type { FairnessFound } from './fairness';

let runtimeInstalled = false;

/** N6: what a node under `upgrade.rollbackSafe` says at start. */
export const ROLLBACK_SAFE_SAID =
  'upgrade.rollbackSafe: this node writes nothing a node of the previous release could not run after it (no memo ' +
  'of waiting calls, no webhook notices, no session handed on at a shutdown, no batch of questions to a ' +
  "tenant's policy, payloads plain); remove it, restarting the nodes one by one, once no node of the previous " +
  'release is left';

/** The runtime's worker heartbeats: see installRuntime. */
export const WORKER_HEARTBEAT_INTERVAL = '10s';

/**
 * Routes the Temporal runtime's and workers' logs through pino; once per process. Its series carry the release's
 * labels (issue 56): the first node's, which is every node's of one process.
 */
export function installRuntime(logger: Logger, release?: NodeRelease): void {
  if (runtimeInstalled) return;
  runtimeInstalled = true;
  const temporalLogger = new TemporalPinoLogger(logger.child({ component: 'temporal' }));
  try {
    const runtime = Runtime.install({
      logger: temporalLogger,
      telemetryOptions: {
        logging: { filter: { core: 'WARN', other: 'WARN' }, forward: {} },
        ...runtimeMetricsOptions(release),
      },
      // Worker heartbeating on: the SDK polls this process's control queue for worker commands (a pushed activity
      // cancel, issue 26) only beside it. The interval is the process's own liveness report to the server (what
      // `temporal worker list` shows), one RPC per process: 10 s is fresh enough for a person and costs nothing.
      workerHeartbeatInterval: WORKER_HEARTBEAT_INTERVAL,
      // oz0 owns SIGINT/SIGTERM: it drains its nodes, stops their servers, then exits.
      shutdownSignals: [],
    });
    // Workers take the runtime's logger when they are made (all after this): lines below oz0's level go no further.
    const mutable = runtime as { logger: Runtime['logger'] };
    mutable.logger = new TemporalLevelFilter(runtime.logger, temporalLogger);
  } catch {
    // A runtime already exists in this process (e.g. several nodes in one test): keep it.
  }
}

export interface NodeOptions {
  config: LoadedConfig;
  logger: Logger;
  /** An open connection to share; by default the node opens its own to config.temporal.address. */
  connection?: NativeConnection;
  /** A name for this node in traces and the UI; default `<host>/<pid>`. */
  name?: string;
  /**
   * false: the node runs calls and sessions but no workflow (neither jobs' nor tenants' policies'), leaving them to
   * other nodes: e.g. a test that holds a job's workflow task while its calls run. Default true.
   */
  workflows?: boolean;
}

export interface Oz0Node {
  identity: NodeIdentity;
  pool: ServerPool;
  /** How cancels reach this node (issue 26): `heartbeat` until its start probe proved `push`. */
  route: CancelRoute;
  /** C1: the jobs' histories it follows for their cancels, and its record of them (activities/call/job-follows.ts). */
  follows: JobFollows;
  /** The node's MCP gateway for harnesses (H3). */
  gateway: Gateway;
  /** O1: where this node serves its Prometheus series; undefined when node.metricsPort is unset. */
  metricsUrl?: string;
  /** Issue 56: what it is: its release and the build id of its workflow code, as it said at start. */
  release: NodeRelease;
  /** What it said at start about its sandboxes (I6): which bubblewrap, from where, its limits; or why none can start. */
  isolationLines: Array<{ level: 'info' | 'warn' | 'error'; text: string }>;
  /** F1: what its start probe found of Temporal's fair dispatch, once it ran (undefined: no probe, or it failed). */
  fairness: Promise<FairnessFound | undefined>;
  /** F2, F3: its rule for its slots, and its tenants' caps and rates. */
  shares: ShareGate;
  /** Runs until shutdown() or a fatal error. */
  run(): Promise<void>;
  /** Runs the workers while fn runs, then shuts them down (tests). */
  runUntil<T>(fn: () => Promise<T>): Promise<T>;
  shutdown(): Promise<void>;
}

export async function createNode(opts: NodeOptions): Promise<Oz0Node> {
  const { config, logger } = opts;
  const name = opts.name ?? `${os.hostname()}/${process.pid}`;
  // Issue 56: what this node is, its first line; the build id is of the bundles it loads (bundled now, without dist).
  const release: NodeRelease = { ...readRelease(), buildId: await workflowBuildId() };
  logger.info(
    { node: name, ...releaseLabels(release), commit: release.commit ?? 'unknown' },
    `oz0 ${releaseText(release)}`,
  );
  if (!opts.connection) await assertReachable(config.temporal);
  // O2: before the runtime and the workers, so their interceptors find the SDK.
  startTracing(logger, release);
  await prepareRuntimeMetrics(config.node.metricsPort);
  installRuntime(logger, release);
  const ownConnection = !opts.connection;
  const connection =
    opts.connection ??
    (await NativeConnection.connect(connectionOptions(config.temporal)).catch((err: Error) => {
      throw temporalUnreachable(config.temporal.address, err.message);
    }));
  await ensureSearchAttributes(connection, config.temporal.namespace);
  // D2: every payload of this node's workers and clients goes one way, big ones to the store it names now.
  const data = processDataOf(config);
  logger.info({ node: name }, data.said);
  logger.info({ node: name }, data.sealSaid);
  void data.store?.check().then((why) => {
    if (why)
      logger.error({ node: name }, `the payload store refuses this node (${why}): big payloads and answers fail`);
  });
  const queue = `${config.temporal.taskQueue}/node/${name.replace(/[^A-Za-z0-9_.-]/g, '-')}-${randomBytes(3).toString('hex')}`;
  // N5: its sessions' leases and harnesses run on a queue of their own, apart from the slots their calls take.
  const identity: NodeIdentity = { id: name, queue, sessionQueue: `${queue}/sessions` };
  // S1: servers named by their package are installed before the node takes any call (once: later starts use it).
  await installPackages(config, { log: (line) => logger.info({ node: name }, line) });
  // O1: the node's series, served at /metrics when a port is configured.
  const served =
    config.node.metricsPort === undefined
      ? undefined
      : await serveMetrics({
          port: config.node.metricsPort,
          host: config.node.metricsHost,
          slots: config.node.slots,
          logger,
          node: name,
          release,
        });
  const metrics = served?.metrics;
  // I1-I6: how this node isolates sandboxed servers and harnesses, said at start (or why it cannot); I8: with the
  // bubblewrap it finds, or oz0's pinned copy, installed now where the machine has none.
  const bwrap = provideNodeBwrap(config, (line) => logger.info({ node: name }, line));
  const isolation = new Isolation(config, logger.child({ node: name }), metrics, bwrap);
  const isolationLines = isolation.startupLines();
  for (const line of isolationLines) logger[line.level]({ node: name }, line.text);
  // I9: what nodes gone before this one left (a process outliving its node, their folders) is stopped and removed;
  // this node's folders are claimed, so that the next one can tell.
  const stateRoot = path.resolve(config.baseDir, config.node.stateDir);
  const folderOf = (kind: string) => path.join(stateRoot, kind, identity.queue.replace(/\//g, '_'));
  await stopLeftovers(
    [path.join(stateRoot, 'sandboxes'), path.join(stateRoot, 'sessions')],
    logger.child({ node: name }),
  );
  const sessionRoot = folderOf('sessions');
  claimFolder(folderOf('sandboxes'));
  claimFolder(sessionRoot);
  const pool = new ServerPool({
    config,
    isolation,
    logger: logger.child({ node: name }),
    sandboxRoot: folderOf('sandboxes'),
    killGraceMs: config.node.killGraceSeconds * 1000,
  });
  // Servers start on first use; a command missing here is said now too, naming the server or harness.
  for (const problem of launchProblems(config)) logger.warn({ node: name }, problem);
  // N6: said at start, since it turns this release's changes off until it is removed (docs/deploy.md, "Rolling back").
  if (config.upgrade.rollbackSafe) logger.warn({ node: name }, ROLLBACK_SAFE_SAID);
  const { dataConverter } = data;
  const client = new Client({ connection, namespace: config.temporal.namespace, dataConverter });
  data.useClient(client);
  // D3: a job whose workflow task fails the same way on every try is said once, never retried in silence.
  const stuck = new StuckWatch(client, logger.child({ node: name }));
  // D2: a folder store's objects go with their job's history.
  const stopSweeping = data.folder
    ? sweepEveryHour(
        data.folder,
        client,
        (swept) => logger.info({ node: name, ...swept }, 'removed the stored payloads of jobs Temporal no longer has'),
        (err) => logger.warn({ node: name, err: err.message }, 'could not sweep the payload folder'),
      )
    : () => undefined;
  const gate = new PolicyGate(
    policyTargetOf(config, client),
    logger,
    config.node.policyRefreshMs,
    config.node.policyWatch,
    config.upgrade.rollbackSafe,
  );
  const relay = new CallRelay();
  // F2: what the node's slots hold, by queue; F3: its tenants' caps and rates, counted by their limiters.
  const slotCounter = new SlotCounter();
  const reserve = reserveOf(config.node, config.upgrade);
  const queueSlots = (queue: string) => ({
    slots: config.node.slots,
    reserve,
    busy: () => slotCounter.count(queue),
  });
  const shares = new ShareGate({
    client,
    taskQueue: config.temporal.policyTaskQueue,
    holder: identity.queue,
    holdMs: config.node.permitHoldSeconds * 1000,
    queues: {
      [config.temporal.taskQueue]: queueSlots(config.temporal.taskQueue),
      [identity.queue]: queueSlots(identity.queue),
    },
    gate,
    seedOf: (tenant) => sharesSeedOf(config, tenant),
    logger: logger.child({ node: name }),
  });
  metrics?.countTenants(() => shares.snapshot());
  // F1: each tenant's weight in the config of the queues this node serves, kept as the node learns it.
  const weights = new WeightKeeper(
    client,
    [...sharedQueues(config.temporal), { name: identity.queue, workflows: false, activities: true }],
    name,
    logger.child({ node: name }),
  );
  const stopWeights = gate.onChange((tenant, state) => {
    if (tenant !== ALL_TENANTS) weights.learn(tenant, sharesOf(state, sharesSeedOf(config, tenant)).weight);
  });
  // C1 (issue 36.4): a job's cancel read in its own history stops its calls here before its workflow task has run.
  const follows = new JobFollows(
    client,
    { max: config.node.jobFollows, afterMs: config.node.jobFollowAfterMs },
    logger.child({ node: name }),
  );
  // Issue 26: heartbeats as cancels need them until the node knows the server pushes cancels (found at run).
  const route = new CancelRoute(config.node.heartbeatMs);
  // H3: the node's MCP gateway for the harnesses its sessions run.
  // O2: the gateway's Updates carry a harness call's span to its job (Temporal's client interceptor); the node's own
  // client (policy reads, every call) stays untraced, or each read would be a trace of its own.
  const interceptors = tracingClientInterceptors();
  const gatewayClient = interceptors.length
    ? new Client({
        connection,
        namespace: config.temporal.namespace,
        dataConverter,
        interceptors: { workflow: interceptors },
      })
    : client;
  const gateway = await Gateway.start({
    config,
    pool,
    gate,
    client: gatewayClient,
    relay,
    logger: logger.child({ node: name }),
    metrics,
    answers: data.answers,
  });
  // I9: the node stops what it holds of a job that ended in any way, whether or not the job could say so.
  const harnesses = new RunningHarnesses();
  const endedJobs = new EndedJobs(
    client,
    [pool, harnesses],
    logger.child({ node: name }),
    config.node.sandboxCheckSeconds * 1000,
  );
  // Issue 56.4: aborted on shutdown once the node's calls have ended: its sessions are handed on then.
  const handOver = new AbortController();
  // Every open session's lease and harness listens to it (up to node.maxSessions): no leak, so no limit's warning.
  setMaxListeners(0, handOver.signal);
  const activities = createActivities({
    config,
    pool,
    gate,
    shares,
    relay,
    follows,
    logger,
    metrics,
    release,
    node: identity,
    route,
    client,
    policyMaxAgeMs: config.node.policyMaxAgeMs,
    answers: data.answers,
    answerBound: answerBoundOf(config.node.maxResultMiB, data.store !== undefined),
    owners: data.owners,
    harness: {
      handOver: handOver.signal,
      gateway,
      isolation,
      harnesses,
      killGraceMs: config.node.killGraceSeconds * 1000,
      sessionRoot,
    },
  });
  const traced = tracingWorkerOptions();
  const common: Partial<WorkerOptions> = {
    connection,
    namespace: config.temporal.namespace,
    dataConverter,
    activities,
    identity: name,
    maxConcurrentActivityTaskExecutions: config.node.slots,
    // The SDK sends an activity's heartbeats at most this often; how often oz0 asks is ../activities/heartbeats.ts
    // (every heartbeatMs where a cancel comes only in a heartbeat's answer, far less where the server pushes it).
    maxHeartbeatThrottleInterval: config.node.heartbeatMs,
    defaultHeartbeatThrottleInterval: config.node.heartbeatMs,
    // On shutdown, running calls get this long to finish before they are cancelled.
    shutdownGraceTime: config.node.shutdownGraceSeconds * 1000,
    // A job cached on a node that died waits this long before another node takes its next workflow task (T4).
    stickyQueueScheduleToStartTimeout: '3s',
    // O2: each attempt's span, and the sink of the workflows' spans; F2: what the node's slots hold.
    ...traced,
    interceptors: {
      ...traced.interceptors,
      activity: [slotCounter.interceptor(), ...(traced.interceptors?.activity ?? [])],
    },
  };
  // Issue 36.3: the jobs' workflows and the tenants' policy workflows run on one workflow thread (one isolate).
  const workflowThread = new SharedWorkflowThread();
  const workflows = opts.workflows !== false;
  const shared = workflows
    ? await workflowThread.createWorker({
        ...common,
        taskQueue: config.temporal.taskQueue,
        workflowBundle: await workflowBundle(tracingOn()),
      } as WorkerOptions)
    : await Worker.create({ ...common, taskQueue: config.temporal.taskQueue } as WorkerOptions);
  const own = await Worker.create({ ...common, taskQueue: identity.queue } as WorkerOptions);
  // N5: as many sessions as `node.maxSessions`, each holding nothing but its lease (or its harness) while it is open.
  const sessionsWorker = await Worker.create({
    ...common,
    taskQueue: identity.sessionQueue!,
    maxConcurrentActivityTaskExecutions: config.node.maxSessions,
  } as WorkerOptions);
  // Tenants' policy workflows, on the namespace-wide policy queue (no activities run there).
  const policy =
    config.temporal.policyTaskQueue === config.temporal.taskQueue || !workflows
      ? undefined
      : await workflowThread.createWorker({
          connection,
          namespace: config.temporal.namespace,
          dataConverter,
          identity: name,
          taskQueue: config.temporal.policyTaskQueue,
          workflowBundle: await workflowBundle(tracingOn()),
          stickyQueueScheduleToStartTimeout: '3s',
          sinks: tracingWorkerOptions().sinks,
        } as WorkerOptions);
  /** The workers that run calls and workflows: on shutdown they stop first, the sessions' after them. */
  const callWorkers = [shared, own, ...(policy ? [policy] : [])];
  const workers = [...callWorkers, sessionsWorker];
  const runs = new Map<Worker, Promise<void>>();
  logger.info(
    {
      node: name,
      taskQueue: config.temporal.taskQueue,
      nodeQueue: identity.queue,
      slots: config.node.slots,
      ...releaseLabels(release),
      gateway: gateway.url,
      ...(served ? { metrics: served.url } : {}),
    },
    'node ready',
  );

  let stopping: Promise<void> | undefined;
  const probing = new AbortController();
  let foundFairness!: (found: FairnessFound | undefined) => void;
  const fairness = new Promise<FairnessFound | undefined>((resolve) => (foundFairness = resolve));
  const shutdown = () => {
    stopping ??= (async () => {
      probing.abort();
      follows.close();
      for (const w of callWorkers) if (w.getState() === 'RUNNING') w.shutdown();
      // Issue 56.4: a session's lease ends only after its calls did (within the grace time), and then at once, as a
      // shutdown: the job hands the session on without waiting out a heartbeat, and makes no finished call again.
      await Promise.allSettled(callWorkers.map((w) => runs.get(w)));
      handOver.abort();
      if (sessionsWorker.getState() === 'RUNNING') sessionsWorker.shutdown();
    })();
    return stopping;
  };
  const run = async () => {
    // I/O of its own, beside the workers (its probe needs them running): the node says which way once it knows.
    void findCancelWay({
      connection,
      client,
      namespace: config.temporal.namespace,
      sharedQueue: config.temporal.taskQueue,
      nodeQueue: identity.queue,
      route,
      logger: logger.child({ node: name }),
      signal: probing.signal,
    });
    endedJobs.start();
    void checkFairness();
    try {
      // When one worker ends, for whatever reason, the others go down with it.
      for (const w of workers) runs.set(w, w.run());
      const results = await Promise.allSettled(workers.map((w) => runs.get(w)!.finally(shutdown)));
      const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failed) throw failed.reason;
    } finally {
      // A live call's answer completed from here (activities/call/durable.ts) reaches Temporal before the connection closes.
      await completionsSent();
      await endedJobs.close();
      await gateway.close();
      // F3: no call runs here now: the permits this node held go back to their tenants' limiters.
      await shares.close();
      stopWeights();
      await weights.settled();
      gate.close();
      stuck.close();
      stopSweeping();
      await pool.close();
      fs.rmSync(sessionRoot, { recursive: true, force: true });
      await isolation.close();
      await served?.close();
      await flushTracing();
      if (ownConnection) await connection.close();
    }
  };
  /**
   * F1, beside the workers (a policy is read by query, which a worker answers): the weights of the tenants the config
   * names go into the queues' config, and the node says whether the server dispatches fairly (a warning naming the
   * setting when it does not). A13: it names each field where the config differs from a tenant's durable policy or
   * shares, with the command that would change it: the config only seeds them, and is never applied over them.
   */
  const checkFairness = async () => {
    const target = policyTargetOf(config, client);
    for (const [tenant, { policy }] of Object.entries(config.tenants)) {
      if (probing.signal.aborted) break;
      try {
        const { state, origins } = await readOrigins(target, tenant);
        const shares = sharesSeedOf(config, tenant);
        weights.learn(tenant, sharesOf(state, shares).weight);
        for (const line of configDifferences(tenant, { policy, shares }, state, origins))
          logger.warn({ node: name, tenant }, line);
      } catch (err) {
        if (probing.signal.aborted) break;
        const why = (err as Error).message;
        logger.warn(
          { node: name, tenant, err: why },
          `could not read tenant ${tenant}'s policy to compare it with the config (${why}): the node goes on`,
        );
      }
    }
    if (!config.node.fairnessProbe) return foundFairness(undefined);
    try {
      const found = await probeFairness(client, probing.signal);
      if (found === 'on') logger.info({ node: name }, "Temporal's fair dispatch by tenant is on (SPEC F1)");
      else logger.warn({ node: name, fairness: found }, FAIRNESS_SAID[found]);
      foundFairness(found);
    } catch (err) {
      if (!probing.signal.aborted)
        logger.warn({ node: name, err: (err as Error).message }, "could not tell whether Temporal's dispatch is fair");
      foundFairness(undefined);
    }
  };
  return {
    identity,
    pool,
    route,
    follows,
    gateway,
    fairness,
    shares,
    release,
    ...(served ? { metricsUrl: served.url } : {}),
    isolationLines,
    run,
    shutdown,
    async runUntil<T>(fn: () => Promise<T>): Promise<T> {
      const running = run();
      try {
        return await fn();
      } finally {
        await shutdown();
        await running;
      }
    },
  };
}
