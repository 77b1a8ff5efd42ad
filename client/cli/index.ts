/**
 * The oz0 CLI (SPEC "CLI"): `./bin/oz0 <command> --help` for each. Data goes to stdout (with --json as
 * JSON); logs and progress to stderr. One file per command group, each loading what a command runs only when it
 * runs (client/cli/common.ts): help and a usage error answer at once.
 */
import { Command, CommanderError } from 'commander';
import { registerCallCommands } from './calls';
import { UsageError } from './common';
import { registerJobCommands } from './jobs';
import { printRelease, registerNodeCommands } from './nodes';
import { registerPluginCommands } from './plugin';
import { registerInboxCommands } from './inbox';
import { registerKeyCommands } from './keys';
import { registerPolicyCommands, registerToolCommands } from './policy';
import { registerTenantCommands } from './tenants';

export { UsageError };

/** `oz0 --version` asked: said once the parse stops, as the release is read asynchronously (printRelease). */
class VersionAsked extends Error {}

export function buildProgram(): Command {
  const program = new Command('oz0')
    .description('Durable MCP tool calls for agent jobs, on Temporal')
    .showHelpAfterError()
    .exitOverride()
    // A command's options follow it: `oz0 inbox decodes --config F` gives F to `decodes`, not to `inbox`.
    .enablePositionalOptions()
    .option('-V, --version', 'print the release and build id of this oz0, and exit (as `oz0 worker --version`)')
    // As commander's own --version does: the parse stops here, and main() answers.
    .on('option:version', () => {
      throw new VersionAsked();
    });
  registerNodeCommands(program);
  registerJobCommands(program);
  registerCallCommands(program);
  registerToolCommands(program);
  registerPolicyCommands(program);
  registerTenantCommands(program);
  registerPluginCommands(program);
  registerInboxCommands(program);
  registerKeyCommands(program);
  return program;
}

export async function main(argv = process.argv): Promise<void> {
  try {
    await buildProgram().parseAsync(argv);
  } catch (err) {
    if (err instanceof VersionAsked) return printRelease(false);
    if (err instanceof CommanderError) {
      // Help and --version exit 0; a missing, malformed or unknown argument is a usage error like the others: 2.
      process.exitCode = err.exitCode === 0 ? 0 : 2;
      return;
    }
    if (await isUsageError(err)) {
      process.stderr.write(`oz0: ${(err as Error).message}\n`);
      process.exitCode = 2;
      return;
    }
    // Temporal unreachable, no such job, …: one line; the stack only when asked for.
    if (process.env.OZ0_DEBUG) throw err;
    process.stderr.write(`oz0: ${(err as Error).message ?? String(err)}\n`);
    process.exitCode = 1;
  }
}

/** A mistake of the user's (an argument, the config, a job spec): one line, exit 2. */
async function isUsageError(err: unknown): Promise<boolean> {
  if (err instanceof UsageError) return true;
  // The command that threw a ConfigError or a JobSpecError has loaded their modules already.
  const [{ ConfigError }, { JobSpecError }] = await Promise.all([
    import('../../common/config.js'),
    import('../../model/schemas.js'),
  ]);
  return err instanceof ConfigError || err instanceof JobSpecError;
}

if (require.main === module) {
  main().catch(async (err) => {
    const { createLogger } = await import('../../common/logger.js');
    createLogger().error(err);
    process.exit(1);
  });
}
