/**
 * `npm run cluster`: a real oz0 cluster on this machine, without Docker: PostgreSQL, the Temporal server built
 * from its Go module, the Web UI, and N `oz0 worker` nodes (deploy/local-cluster/). Prints where everything is,
 * runs until Ctrl-C, then stops it all: nodes first, then Temporal, then PostgreSQL (fast shutdown).
 *
 *   npm run cluster -- [--nodes 3] [--json] [--no-ui] [--observe]   --observe: Jaeger and Prometheus too (SPEC O1-O2)
 *   npm run cluster -- --check              the short version CI runs: big answers on its S3 store, then one session
 *                                           through two nodes, one killed
 *   npm run cluster -- --chaos [--short]    the chaos suite on the cluster, every fault: bench/chaos --cluster,
 *                                           started as a process of its own (it brings the cluster up itself)
 *   npm run cluster -- --down               removes the cluster's state (.oz0/cluster), stopping what still runs
 *
 * While it runs, SIGUSR2 restarts its Temporal server (kill -9, then start): see local-cluster/control.ts.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { Command, Option } from 'commander';
import { z } from 'zod';
import { checkAnswers, checkPassed, runCheck } from './local-cluster/check';
import type { LocalCluster } from './local-cluster';
import { writeControl } from './local-cluster/control';
import { stopLeftovers } from './local-cluster/leftovers';
import { clusterRun, onLocalCluster } from './local-cluster/run';

const OptionsSchema = z
  .strictObject({
    nodes: z.coerce.number().int().min(0).max(20).default(3),
    json: z.boolean().default(false),
    ui: z.boolean().default(true),
    observe: z.boolean().default(false),
    down: z.boolean().default(false),
    check: z.boolean().default(false),
    chaos: z.boolean().default(false),
    short: z.boolean().default(false),
  })
  .refine((o) => [o.down, o.check, o.chaos].filter(Boolean).length <= 1, 'one of --down, --check and --chaos at a time')
  .refine((o) => !o.short || o.chaos, '--short goes with --chaos');

const run = clusterRun();
const { stateDir, logger, say } = run;

function describe(c: LocalCluster) {
  return {
    temporal: c.address,
    namespace: c.namespace,
    ui: c.uiUrl ?? null,
    jaeger: c.observability?.jaegerUrl ?? null,
    prometheus: c.observability?.prometheusUrl ?? null,
    postgres: `127.0.0.1:${c.postgres.port}`,
    nodes: c.nodes.map((n) => ({ name: n.name, pid: n.proc.pid, log: n.logFile })),
    config: c.configFile,
    logs: c.logsDir,
  };
}

function print(c: LocalCluster, uiAsked: boolean): string {
  const d = describe(c);
  const noUi = uiAsked ? '(not available, see logs/go-build.log)' : '(not started: --no-ui)';
  const rows: Array<[string, string]> = [
    ['Temporal gRPC', d.temporal],
    ['namespace', d.namespace],
    ['Web UI', d.ui ? `${d.ui}/namespaces/${d.namespace}/workflows` : noUi],
    ['PostgreSQL', `${d.postgres} (data in ${path.join(stateDir, 'pg')})`],
    ...(d.jaeger && d.prometheus
      ? ([
          ['Jaeger', `${d.jaeger}/api/traces?service=oz0&operation=RunWorkflow:job (its query API)`],
          ['Prometheus', `${d.prometheus}/graph?g0.expr=sum%20by%20(tool)%20(oz0_calls_total)`],
        ] as Array<[string, string]>)
      : []),
    ...d.nodes.map((n): [string, string] => [n.name, `pid ${n.pid}, log ${n.log}`]),
    ['nodes config', d.config],
    ['logs', d.logs],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  return (
    `${rows.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join('\n')}\n\n` +
    `Try: ./bin/oz0 job start examples/jobs/demo.json --config ${d.config} --wait\n` +
    'Ctrl-C stops everything.\n'
  );
}

async function main(): Promise<void> {
  const program = new Command('cluster')
    .description('a real oz0 cluster on 127.0.0.1: PostgreSQL, the Temporal server, the Web UI and N nodes')
    .addOption(new Option('--nodes <n>', 'oz0 nodes (oz0 worker processes)').default('3'))
    .addOption(new Option('--json', 'print the addresses as JSON'))
    .addOption(new Option('--no-ui', 'no Web UI'))
    .addOption(new Option('--observe', "Jaeger receiving the nodes' spans and Prometheus scraping their /metrics"))
    .addOption(new Option('--down', 'stop what still runs and remove the state in .oz0/cluster'))
    .addOption(new Option('--check', 'one session through two nodes, one killed; the counts checked; then down'))
    .addOption(new Option('--chaos', 'the chaos suite (bench/chaos --cluster) on the cluster, every fault; then down'))
    .addOption(new Option('--short', 'with --chaos: a few trials of each'))
    .parse();
  const parsed = OptionsSchema.safeParse(program.opts());
  if (!parsed.success)
    program.error(`cluster: ${parsed.error.issues.map((i) => [...i.path, i.message].join(': ')).join('; ')}`);
  const opts = parsed.data!;

  if (opts.down) {
    await stopLeftovers(stateDir, say);
    fs.rmSync(stateDir, { recursive: true, force: true });
    process.stderr.write(`cluster: removed ${stateDir}\n`);
    return;
  }
  if (opts.chaos) {
    // bench/ is above deploy/: the chaos suite is started, never imported; it brings the cluster up itself.
    const chaos = path.join(__dirname, '..', 'bench', 'chaos', 'index.js');
    const args = [chaos, '--cluster', ...(opts.short ? ['--short'] : []), ...(opts.observe ? ['--observe'] : [])];
    const ran = spawnSync(process.execPath, args, { stdio: 'inherit' });
    if (ran.error) throw ran.error;
    process.exitCode = ran.status ?? 1;
    return;
  }
  // The check wants two nodes.
  const nodes = opts.check ? 2 : opts.nodes;
  let failed = false;
  await onLocalCluster(run, { nodes, ui: opts.ui && !opts.check, observe: opts.observe }, async (cluster) => {
    if (opts.check) {
      const counts = { ...(await checkAnswers(cluster, say)), ...(await runCheck(cluster, say)) };
      failed = !checkPassed(counts);
      process.stdout.write(`${JSON.stringify(counts)}\ncheck: ${failed ? 'FAILED' : 'passed'}\n`);
      return;
    }
    process.stdout.write(opts.json ? `${JSON.stringify(describe(cluster))}\n` : print(cluster, opts.ui));
    const control = { pid: process.pid, address: cluster.address, temporalPid: cluster.temporal.pid(), restarts: 0 };
    writeControl(stateDir, control);
    // SIGUSR2: kill -9 the Temporal server and start it again (tests of durability across a restart use it).
    let restarting = Promise.resolve();
    process.on('SIGUSR2', () => {
      restarting = restarting.then(async () => {
        say('SIGUSR2: killing the Temporal server (kill -9) and starting it again');
        await cluster.temporal.kill();
        await cluster.temporal.start();
        writeControl(stateDir, { ...control, temporalPid: cluster.temporal.pid(), restarts: ++control.restarts });
      });
    });
    await new Promise<void>((resolve) => {
      process.once('SIGINT', () => resolve());
      process.once('SIGTERM', () => resolve());
    });
    await restarting;
    say('stopping: nodes, then Temporal, then PostgreSQL');
  });
  say('stopped');
  if (failed) process.exitCode = 1;
}

main().catch((err) => {
  logger.error(err);
  process.stderr.write(`cluster: ${err instanceof Error ? err.message : err}\n`);
  process.exit(1);
});
