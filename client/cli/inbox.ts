/** `oz0 inbox`: the approvals inbox (A8-A9), a process of its own beside the nodes. */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { UsageError, config, withConfig, withJobClient } from './common';
import type { ConfigOpts } from './common';

function urlArg(value: string): string {
  try {
    const url = new URL(value);
    if (url.protocol === 'http:' || url.protocol === 'https:') return value.replace(/\/+$/, '');
  } catch {
    // said below
  }
  throw new InvalidArgumentError('an http:// or https:// address');
}

export function registerInboxCommands(program: Command): void {
  withConfig(program.command('inbox'))
    .description(
      "serve the approvals inbox: people sign in with the config's identity provider (inbox.oidc) and answer the " +
        'calls that wait for them (tenants.<t>.approvers); runs until stopped',
    )
    .option('--temporal-ui <url>', "the Temporal UI's address, to link each job (e.g. http://127.0.0.1:8233)", urlArg)
    .action(async (opts: ConfigOpts & { temporalUi?: string }) => {
      const cfg = await config(opts);
      if (!cfg.inbox) {
        throw new UsageError(
          `the config (${cfg.source}) has no "inbox": name its identity provider (inbox.oidc: issuer, clientId, clientSecret) — docs/approvals.md`,
        );
      }
      const [{ readSecret }, { oidcSignIn }, { startInbox }] = await Promise.all([
        import('../../common/credentials.js'),
        import('../inbox/oidc.js'),
        import('../inbox/server.js'),
      ]);
      const { oidc } = cfg.inbox;
      const secret = oidc.clientSecret
        ? readSecret(oidc.clientSecret, { env: process.env, baseDir: cfg.baseDir }, 'inbox.oidc.clientSecret')
        : undefined;
      const signIn = await oidcSignIn(oidc, secret);
      await withJobClient(cfg, async (jc) => {
        const inbox = await startInbox({
          config: cfg,
          client: jc.client,
          signIn,
          temporalUi: opts.temporalUi,
          log: (line) => process.stderr.write(`oz0 inbox: ${line}\n`),
        });
        const approvers = Object.entries(cfg.tenants)
          .filter(([, t]) => t.approvers)
          .map(([name]) => name);
        process.stdout.write(
          `oz0 inbox: ${inbox.url}/ (sign in with ${oidc.issuer}; tenants with approvers: ${approvers.join(', ') || 'none'})\n`,
        );
        await new Promise<void>((resolve) => {
          process.once('SIGINT', resolve);
          process.once('SIGTERM', resolve);
        });
        await inbox.close();
      });
    });
}
