/**
 * What every command group of the CLI shares: config, a Temporal client per command, output, argument checks.
 *
 * Every command's definition imports this file, so it stays light: what a command runs (the config's schema, the
 * Temporal client, a node, the MCP SDK) is loaded when it runs, with `await import(…)` in its action, and the zod
 * schemas when an argument is checked. `oz0 --help` loads commander and these files, nothing more
 * (test/integration/cli-start.test.ts).
 */
import fs from 'node:fs';
import readline from 'node:readline';
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import type { z } from 'zod';
import type { LoadedConfig } from '../../common/config';
import type * as Schemas from '../../model/schemas';
import type { JobClient } from '../jobs';

/** A user error: printed as one line, exit status 2, no stack. */
export class UsageError extends Error {
  override name = 'UsageError';
}

export interface ConfigOpts {
  config?: string;
}

/** Adds `--config` to a command. */
export function withConfig(cmd: Command): Command {
  return cmd.option('--config <file>', 'config file (default: ./oz0.config.json or $OZ0_CONFIG)');
}

export async function config(opts: ConfigOpts): Promise<LoadedConfig> {
  const { loadConfig } = await import('../../common/config.js');
  return loadConfig({ file: opts.config });
}

/** Connects to Temporal for one command and closes the connection after it. */
export async function withJobClient<T>(cfg: LoadedConfig, fn: (jc: JobClient) => Promise<T>): Promise<T> {
  const [{ connectJobClient }, { policyTargetOf }] = await Promise.all([
    import('../jobs.js'),
    import('../../common/policy-client.js'),
  ]);
  const jc = await connectJobClient(cfg);
  try {
    return await fn({ ...jc, harnesses: Object.keys(cfg.harnesses), policy: policyTargetOf(cfg, jc.client) });
  } finally {
    await jc.close();
  }
}

/** Data on stdout: JSON with --json, else the text a person reads. */
export function print(data: unknown, json: boolean | undefined, text: () => string): void {
  process.stdout.write(json ? `${JSON.stringify(data, null, 2)}\n` : `${text()}\n`);
}

/** The zod schemas, loaded when the first argument is checked (commander's argument parsers are synchronous). */
function schemas(): typeof Schemas {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return require('../../model/schemas') as typeof Schemas;
}

/** A commander argument parser from one of the zod schemas: the schema's first message is the error. */
export function zodArg<T>(pick: (schemas: typeof Schemas) => z.ZodType<T>) {
  return (value: string): T => {
    const parsed = pick(schemas()).safeParse(value);
    if (!parsed.success) throw new InvalidArgumentError(parsed.error.issues[0].message);
    return parsed.data;
  };
}

export const jobIdArg = zodArg((s) => s.JobIdSchema);
export const tenantArg = zodArg((s) => s.TenantNameSchema);
export const serverArg = zodArg((s) => s.ServerNameSchema);
export const patternArg = zodArg((s) => s.PatternSchema);
export const decisionArg = zodArg((s) => s.DecisionSchema);

export function portArg(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new InvalidArgumentError('a port is 1-65535');
  return port;
}

/** Asks on stderr, reads one line from stdin: yes only for y or yes. */
export async function confirm(question: string): Promise<boolean> {
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

export function readFile(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new UsageError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}
