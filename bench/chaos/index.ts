/**
 * `npm run chaos`: faults thrown at real nodes (`oz0 worker` processes) and a real dev server while jobs make
 * key-honouring writes to the example ledger (./rig.ts), then the counts that matter, read on the servers' side
 * (./report.ts). One file per scenario:
 *
 * - node.ts: a node killed (kill -9 of it and its servers) at a random moment, during plain calls and sessions;
 * - temporal.ts: the Temporal dev server killed (kill -9) and started again on the same SQLite file;
 * - cancel.ts: jobs cancelled at random moments, racing their calls' answers (a sandboxed call, then a plugin one);
 * - busy.ts: 429 storms from a remote ledger, with Retry-After;
 * - partition.ts: a node cut off from the server (SIGSTOP for longer than its heartbeat timeout, then SIGCONT): its
 *   calls go on elsewhere, and what its servers answered meanwhile (its late answers) must be ignored; a sandbox it
 *   started for a job whose call had answered may outlive the job (the job's end cannot reach the node): counted,
 *   not an early CANCELED, since no call runs in it;
 * - postgres.ts (on the local cluster only, `--cluster`): PostgreSQL restarted, fast shutdown;
 * - upgrade.ts (only when named, `--only upgrade`: it builds the previous release first): nodes of the previous
 *   release replaced by this release's one at a time while jobs run, and back (N6).
 *
 * With `--cluster` (what `npm run cluster -- --chaos` starts) it brings up the local cluster (deploy/local-cluster)
 * and throws the faults at it: `temporal` kills its real Temporal server instead of the dev server.
 * Every write that answered must be in the ledger exactly once, no key twice, no job lost, and no job may show
 * CANCELED while one of its calls still runs (its sandbox alive, or its plugin call not yet stopped): the temporal,
 * partition and postgres trials each cancel one more job around their fault, to count that there too.
 *
 *   npm run chaos -- [--short] [--trials 6] [--jobs 4] [--only node,temporal,cancel,busy,partition]
 *   npm run chaos -- --cluster [--short] [--observe] [--only …,postgres]
 *   npm run chaos -- [--cluster] --only upgrade
 */
import { Command, Option } from 'commander';
import { z } from 'zod';
import { approveListing, readListing } from '../../client/approve';
import { policyTargetOf } from '../../common/policy-client';
import { createLogger } from '../../common/logger';
import type { LocalCluster } from '../../deploy/local-cluster';
import { clusterRun, onLocalCluster } from '../../deploy/local-cluster/run';
import { listOption } from '../common';
import { Rig, SCENARIOS, newTally } from './rig';
import type { Scenario, Tally, Trial } from './rig';
import { report } from './report';
import { nodeTrial } from './node';
import { temporalTrial } from './temporal';
import { cancelTrial } from './cancel';
import { busyTrial } from './busy';
import { partitionTrial } from './partition';
import { postgresTrial } from './postgres';
import { upgradeTrial } from './upgrade';
import { previousRelease } from '../../deploy/previous-release';

/** Faults that need the local cluster: the dev server has no database of its own to restart. */
const CLUSTER_ONLY: readonly Scenario[] = ['postgres'];
/** Run only when named: the upgrade drill builds the previous release and runs both releases' nodes. */
const NAMED_ONLY: readonly Scenario[] = ['upgrade'];

const TRIALS: Record<Scenario, Trial> = {
  node: nodeTrial,
  temporal: temporalTrial,
  cancel: cancelTrial,
  busy: busyTrial,
  partition: partitionTrial,
  postgres: postgresTrial,
  upgrade: upgradeTrial,
};

const OptionsSchema = z.strictObject({
  short: z.boolean().default(false),
  trials: z.coerce.number().int().min(1).max(1000).optional(),
  jobs: z.coerce.number().int().min(1).max(100).optional(),
  only: listOption('scenario', SCENARIOS),
  cluster: z.boolean().default(false),
  observe: z.boolean().default(false),
});

export interface ChaosOptions {
  short?: boolean;
  trials?: number;
  jobs?: number;
  only?: Scenario[];
  /** Throw the faults at this cluster's Temporal server and PostgreSQL instead of a dev server of its own. */
  cluster?: LocalCluster;
}

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
  const asked = program.opts().only !== undefined;
  if (!asked) chaos.only = chaos.only.filter((s) => !NAMED_ONLY.includes(s));
  if (onCluster) {
    const run = clusterRun();
    const ok = await onLocalCluster(run, { nodes: 0, ui: false, observe }, (cluster) =>
      runChaos({ ...chaos, cluster }),
    );
    run.say('stopped');
    if (!ok) process.exitCode = 1;
    return;
  }
  const cut = chaos.only.filter((s) => CLUSTER_ONLY.includes(s));
  if (asked && cut.length > 0) program.error(`chaos: ${cut.join(', ')} needs the local cluster: --cluster`);
  if (!(await runChaos({ ...chaos, only: chaos.only.filter((s) => !CLUSTER_ONLY.includes(s)) }))) process.exitCode = 1;
}

/** Runs the trials and prints the table; true when nothing was lost, written twice or CANCELED early. */
export async function runChaos(opts: ChaosOptions): Promise<boolean> {
  const trials = opts.trials ?? (opts.short ? 2 : 6);
  const jobsPerTrial = opts.jobs ?? (opts.short ? 3 : 4);
  const only = opts.only ?? SCENARIOS.filter((s) => !NAMED_ONLY.includes(s));
  let previous: string | undefined;
  if (only.includes('upgrade')) {
    process.stderr.write('chaos: building the previous release (once; later runs find it built)\n');
    const built = previousRelease();
    if ('why' in built) throw new Error(`chaos: the upgrade drill needs the previous release: ${built.why}`);
    previous = built.dir;
  }
  const rig = await Rig.open({ cluster: opts.cluster, jobsPerTrial, previous });
  const tallies = new Map<Scenario, Tally>();
  try {
    if (only.includes('busy')) {
      const logger = createLogger({ level: 'warn' });
      const listing = await readListing(rig.config, logger, 'remote');
      await approveListing(policyTargetOf(rig.config, rig.client), 'chaos', listing);
    }
    for (let t = 0; t < trials; t++) {
      for (const scenario of only) {
        const tally = tallies.get(scenario) ?? newTally();
        tallies.set(scenario, tally);
        tally.trials++;
        tally.jobs += jobsPerTrial;
        process.stderr.write(`chaos: ${scenario} trial ${t + 1}/${trials}\n`);
        await TRIALS[scenario](rig, t, tally);
        // The client's connection was to the server before: a fresh one to the server now.
        if (scenario === 'temporal' || scenario === 'postgres') await rig.reconnect();
      }
    }
  } finally {
    await rig.close();
  }
  return afterClose(() =>
    report(rig, tallies, { trials, jobsPerTrial, short: opts.short, cluster: opts.cluster !== undefined }),
  );
}

/**
 * The report, whatever a Temporal client's retry still does after its connection closed: a retry timer that fires
 * then throws "Channel has been shut down" from @temporalio/client's grpc-retry, outside any call of ours. Such an
 * error is said in one line; any other ends the run as an uncaught error would.
 */
async function afterClose<T>(fn: () => Promise<T> | T): Promise<T> {
  const closed = (err: unknown) => err instanceof Error && /Channel has been shut down/.test(err.message);
  const onError = (err: unknown) => {
    if (!closed(err)) {
      console.error(err);
      process.exit(1);
    }
    process.stderr.write(`chaos: a client's retry after its connection closed: ${(err as Error).message}\n`);
  };
  process.on('uncaughtException', onError);
  process.on('unhandledRejection', onError);
  try {
    return await fn();
  } finally {
    // Retries of a closed channel are spaced up to a few seconds apart: the guard stays a while longer.
    setTimeout(() => {
      process.off('uncaughtException', onError);
      process.off('unhandledRejection', onError);
    }, 10_000).unref();
  }
}

if (require.main === module)
  main().catch((err) => {
    console.error(err);
    process.exit(1);
  });
