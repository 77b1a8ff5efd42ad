/**
 * The oz0 CLI (SPEC "CLI"): `./bin/oz0 <command> --help` for each. Data goes to stdout (with --json as
 * JSON); logs and progress to stderr.
 */
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { z } from 'zod';
import { DecisionSchema, JobSpecError, PatternSchema, ServerNameSchema, TenantNameSchema } from '../workflows/schemas';
import { ConfigError, loadConfig } from '../worker/config';
import type { LoadedConfig } from '../worker/config';
import { startDevServer } from '../worker/dev-server';
import { createLogger } from '../worker/logger';
import { createNode } from '../worker/node';
import type { Oz0Node } from '../worker/node';
import { findTemporalCli } from '../worker/temporal-cli';
import { formatPolicy, formatTrace } from './format';
import { watchJob } from './watch';
import { approveListing, formatListing, readListing } from './approve';
import { changePolicy, policyTargetOf, readPolicy } from './policy';
import type { PolicyTarget } from './policy';
import { ALL_TENANTS } from '../workflows/policy-rules';
import type { Decision } from '../workflows/policy-rules';
import { killUpdate, reviveUpdate, revokeUpdate, setPolicyUpdate } from '../workflows/policy';
import { cancelJob, connectJobClient, jobStatus, jobTrace, startJob } from './jobs';
import type { JobClient, ShownTrace } from './jobs';
import { registerPluginCommands } from './plugin-test';

/** A user error: printed as one line, exit status 2, no stack. */
export class UsageError extends Error {
  override name = 'UsageError';
}

const JobIdSchema = z.string().regex(/^[A-Za-z0-9_.:@/-]{1,200}$/, 'a job id is 1-200 letters, digits or _.:@/-');

function jobIdArg(value: string): string {
  const parsed = JobIdSchema.safeParse(value);
  if (!parsed.success) throw new InvalidArgumentError(parsed.error.issues[0].message);
  return value;
}

function portArg(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new InvalidArgumentError('a port is 1-65535');
  return port;
}

interface ConfigOpts {
  config?: string;
}

function config(opts: ConfigOpts): LoadedConfig {
  return loadConfig({ file: opts.config });
}

/** Connects to Temporal for one command and closes the connection after it. */
async function withJobClient<T>(cfg: LoadedConfig, fn: (jc: JobClient) => Promise<T>): Promise<T> {
  const jc = await connectJobClient(cfg.temporal);
  try {
    return await fn(jc);
  } finally {
    await jc.close();
  }
}

function print(data: unknown, json: boolean | undefined, text: () => string): void {
  process.stdout.write(json ? `${JSON.stringify(data, null, 2)}\n` : `${text()}\n`);
}

/** Runs a node until SIGINT/SIGTERM, then shuts it down (and runs `also` after). */
async function runUntilSignal(node: Oz0Node, also?: () => Promise<void>): Promise<void> {
  const running = node.run();
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once('SIGINT', stop);
    process.once('SIGTERM', stop);
    running.finally(stop).catch(() => undefined);
  });
  await node.shutdown();
  try {
    await running;
  } finally {
    await also?.();
  }
}

export function buildProgram(): Command {
  const program = new Command('oz0')
    .description('Durable MCP tool calls for agent jobs, on Temporal')
    .showHelpAfterError()
    .exitOverride();
  const withConfig = (cmd: Command) =>
    cmd.option('--config <file>', 'config file (default: ./oz0.config.json or $OZ0_CONFIG)');

  withConfig(program.command('dev'))
    .description('the embedded default: a Temporal dev server (SQLite file, Web UI) plus one node')
    .option('--port <port>', 'gRPC port of the dev server (default: from temporal.address, else 7233)', portArg)
    .option('--ui-port <port>', 'port of the Web UI (default: gRPC port + 1000)', portArg)
    .option('--db <file>', 'SQLite file (default: <stateDir>/temporal.db)')
    .action(async (opts: ConfigOpts & { port?: number; uiPort?: number; db?: string }) => {
      const cfg = config(opts);
      const logger = createLogger();
      const [host, portText] = cfg.temporal.address.split(':');
      const port = opts.port ?? Number(portText ?? 7233);
      const state = path.resolve(cfg.baseDir, cfg.node.stateDir);
      fs.mkdirSync(state, { recursive: true });
      const server = await startDevServer({
        cli: findTemporalCli({ log: (line) => logger.info(line) }),
        ip: host === 'localhost' ? '127.0.0.1' : host,
        port,
        uiPort: opts.uiPort ?? port + 1000,
        dbFile: path.resolve(opts.db ?? path.join(state, 'temporal.db')),
        logFile: path.join(state, 'temporal-server.log'),
        namespace: cfg.temporal.namespace,
      });
      cfg.temporal.address = server.address;
      const node = await createNode({ config: cfg, logger });
      process.stderr.write(
        `oz0 dev: Temporal at ${server.address}, Web UI at ${server.uiUrl}/namespaces/${cfg.temporal.namespace}/workflows\n` +
          `oz0 dev: one node on task queue ${cfg.temporal.taskQueue}; Ctrl-C stops both\n`,
      );
      await runUntilSignal(node, () => server.stop());
    });

  withConfig(program.command('worker'))
    .description('one node: serves the shared task queue and its own')
    .option('--name <name>', 'name of this node in traces (default: host/pid)')
    .action(async (opts: ConfigOpts & { name?: string }) => {
      const cfg = config(opts);
      const node = await createNode({ config: cfg, logger: createLogger(), name: opts.name });
      process.stderr.write(
        `oz0 worker: node ${node.identity.id} on ${cfg.temporal.address} (${cfg.temporal.taskQueue})\n`,
      );
      await runUntilSignal(node);
    });

  const job = program.command('job').description('start, watch and stop jobs');

  withConfig(job.command('start'))
    .description(
      'start a job from a spec file (- for stdin); prints its id, or with --wait its trace (exit 1 unless COMPLETED)',
    )
    .argument('<spec>', 'job spec JSON file')
    .option('--id <id>', 'job id (the workflow id)', jobIdArg)
    .option('--wait', 'wait for the job to end and print its trace')
    .option('--json', 'print JSON')
    .action(async (specFile: string, opts: ConfigOpts & { id?: string; wait?: boolean; json?: boolean }) => {
      const text = specFile === '-' ? fs.readFileSync(0, 'utf8') : readFile(specFile);
      let spec: unknown;
      try {
        spec = JSON.parse(text);
      } catch (err) {
        throw new UsageError(`${specFile} is not JSON: ${(err as Error).message}`);
      }
      await withJobClient(config(opts), async (jc) => {
        const handle = await startJob(jc, spec, { workflowId: opts.id });
        if (!opts.wait) return print({ jobId: handle.workflowId }, opts.json, () => handle.workflowId);
        await handle.result().catch(() => undefined);
        const trace = await jobTrace(jc.client, handle.workflowId);
        print(traceJson(trace), opts.json, () => formatTrace(trace));
        // Like a process: 0 when the job completed, 1 when it ended any other way.
        if (trace.status !== 'COMPLETED') process.exitCode = 1;
      });
    });

  withConfig(job.command('status'))
    .description("running, cancelling, or Temporal's final status")
    .argument('<id>', 'job id', jobIdArg)
    .option('--json', 'print JSON')
    .action(async (id: string, opts: ConfigOpts & { json?: boolean }) => {
      await withJobClient(config(opts), async (jc) => {
        const status = await jobStatus(jc.client, id);
        print({ jobId: id, status }, opts.json, () => status);
      });
    });

  withConfig(job.command('trace'))
    .description("the job's steps and every attempt")
    .argument('<id>', 'job id', jobIdArg)
    .option('--json', 'print JSON')
    .action(async (id: string, opts: ConfigOpts & { json?: boolean }) => {
      await withJobClient(config(opts), async (jc) => {
        const trace = await jobTrace(jc.client, id);
        print(traceJson(trace), opts.json, () => formatTrace(trace));
      });
    });

  withConfig(job.command('watch'))
    .description("live progress bars for the job's running calls, with attempts and busy waits, until it ends")
    .argument('<id>', 'job id', jobIdArg)
    .option('--json', 'print a JSON snapshot per change')
    .action(async (id: string, opts: ConfigOpts & { json?: boolean }) => {
      await withJobClient(config(opts), async (jc) => {
        const status = await watchJob(jc.client, id, { json: opts.json });
        if (!opts.json) process.stdout.write(`job ${id}: ${status}\n`);
      });
    });

  withConfig(job.command('cancel'))
    .description('cancel a job: its running calls are stopped, then it ends CANCELED')
    .argument('<id>', 'job id', jobIdArg)
    .action(async (id: string, opts: ConfigOpts) => {
      await withJobClient(config(opts), async (jc) => {
        await cancelJob(jc.client, id);
        process.stdout.write(`cancel requested for ${id}\n`);
      });
    });

  const tool = program.command('tool').description('kill switches');
  for (const [name, update, verb] of [
    ['kill', killUpdate, 'stop every running call of TOOL and refuse new ones until revived'],
    ['revive', reviveUpdate, 'take the kill switch of TOOL off again'],
  ] as const) {
    withConfig(tool.command(name))
      .description(`${verb} (TOOL: server.function, server.* or *; every tenant unless --tenant)`)
      .argument('<tool>', 'tool or pattern', zodArg(PatternSchema))
      .option('--tenant <tenant>', 'only this tenant', zodArg(TenantNameSchema))
      .option('--json', 'print JSON')
      .action(async (pattern: string, opts: ConfigOpts & { tenant?: string; json?: boolean }) => {
        const cfg = config(opts);
        await withJobClient(cfg, async (jc) => {
          const tenant = opts.tenant ?? ALL_TENANTS;
          const state = await changePolicy(policyTarget(cfg, jc), tenant, update, [pattern]);
          const who = tenant === ALL_TENANTS ? 'every tenant' : `tenant ${tenant}`;
          print(
            { tenant, kills: state.kills },
            opts.json,
            () => `${pattern}: ${name === 'kill' ? 'killed' : 'revived'} for ${who}`,
          );
        });
      });
  }

  const policy = program.command('policy').description("a tenant's policy and approvals");
  withConfig(policy.command('show'))
    .description("the tenant's policy, kill switches and approved listings")
    .argument('<tenant>', 'tenant', zodArg(TenantNameSchema))
    .option('--json', 'print JSON')
    .action(async (tenant: string, opts: ConfigOpts & { json?: boolean }) => {
      const cfg = config(opts);
      await withJobClient(cfg, async (jc) => {
        const target = policyTarget(cfg, jc);
        const [state, all] = await Promise.all([readPolicy(target, tenant), readPolicy(target, ALL_TENANTS)]);
        const shown = { tenant, ...state, killsForAllTenants: all.kills };
        print(shown, opts.json, () => formatPolicy(shown));
      });
    });
  withConfig(policy.command('set'))
    .description('allow, deny or ask for a tool pattern (server.function, server.* or *)')
    .argument('<tenant>', 'tenant', zodArg(TenantNameSchema))
    .argument('<pattern>', 'tool pattern', zodArg(PatternSchema))
    .argument('<decision>', 'allow | deny | ask', zodArg(DecisionSchema))
    .action(async (tenant: string, pattern: string, decision: Decision, opts: ConfigOpts) => {
      const cfg = config(opts);
      await withJobClient(cfg, async (jc) => {
        await changePolicy(policyTarget(cfg, jc), tenant, setPolicyUpdate, [pattern, decision]);
        process.stdout.write(`${tenant}: ${pattern} ${decision}\n`);
      });
    });
  withConfig(policy.command('approve'))
    .description("show a server's listing and its digest, then approve exactly that listing")
    .argument('<tenant>', 'tenant', zodArg(TenantNameSchema))
    .argument('<server>', 'server name from the config', zodArg(ServerNameSchema))
    .option('--yes', 'do not ask')
    .action(async (tenant: string, server: string, opts: ConfigOpts & { yes?: boolean }) => {
      const cfg = config(opts);
      const listing = await readListing(cfg, createLogger({ level: 'warn' }), server);
      process.stdout.write(`${formatListing(listing)}\n`);
      if (!opts.yes && !(await confirm(`Approve exactly this listing of ${server} for ${tenant}? [y/N] `))) {
        throw new UsageError('not approved');
      }
      await withJobClient(cfg, async (jc) => {
        await approveListing(policyTarget(cfg, jc), tenant, listing);
        process.stdout.write(`${tenant}: approved ${server} at ${listing.digest}\n`);
      });
    });
  withConfig(policy.command('revoke'))
    .description("take back the approval of a server's listing")
    .argument('<tenant>', 'tenant', zodArg(TenantNameSchema))
    .argument('<server>', 'server name', zodArg(ServerNameSchema))
    .action(async (tenant: string, server: string, opts: ConfigOpts) => {
      const cfg = config(opts);
      await withJobClient(cfg, async (jc) => {
        await changePolicy(policyTarget(cfg, jc), tenant, revokeUpdate, [server]);
        process.stdout.write(`${tenant}: revoked ${server}\n`);
      });
    });

  registerPluginCommands(program, { withConfig, zodArg, print, UsageError });
  return program;
}

function policyTarget(cfg: LoadedConfig, jc: JobClient): PolicyTarget {
  return policyTargetOf(cfg, jc.client);
}

/** Asks on stderr, reads one line from stdin: yes only for y or yes. */
async function confirm(question: string): Promise<boolean> {
  const rl = readline.createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = await new Promise<string>((resolve) => {
      rl.question(question, resolve);
      rl.once('close', () => resolve(''));
    });
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}

function zodArg<T>(schema: z.ZodType<T>) {
  return (value: string): T => {
    const parsed = schema.safeParse(value);
    if (!parsed.success) throw new InvalidArgumentError(parsed.error.issues[0].message);
    return parsed.data;
  };
}

/** SPEC "Trace JSON": `{ jobId, status, steps }`, plus the run counters. */
function traceJson(trace: ShownTrace) {
  return {
    jobId: trace.jobId,
    status: trace.status,
    run: trace.run,
    calls: trace.calls,
    omitted: trace.omitted,
    steps: trace.steps.map(({ tool, key, session, result, attempts, node }) => ({
      tool,
      key,
      session,
      result,
      attempts,
      node,
    })),
  };
}

function readFile(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

export async function main(argv = process.argv): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    if (err instanceof CommanderError) {
      process.exitCode = err.exitCode;
      return;
    }
    if (err instanceof UsageError || err instanceof ConfigError || err instanceof JobSpecError) {
      process.stderr.write(`oz0: ${err.message}\n`);
      process.exitCode = 2;
      return;
    }
    // Temporal unreachable, no such job, …: one line; the stack only when asked for.
    if (process.env.OZ0_DEBUG) throw err;
    process.stderr.write(`oz0: ${(err as Error).message ?? String(err)}\n`);
    process.exitCode = 1;
  }
}

if (require.main === module) {
  main().catch((err) => {
    createLogger().error(err);
    process.exit(1);
  });
}
