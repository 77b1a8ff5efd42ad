/** `oz0 inbox`: the approvals inbox (A8-A9), a process of its own beside the nodes. */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { UsageError, config, print, withConfig, withJobClient } from './common';
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
  // Options after `decodes` are its own (both name --config): the parent's only before it.
  const inboxCommand = program.command('inbox').enablePositionalOptions();
  withConfig(inboxCommand)
    .description(
      "serve the approvals inbox: people sign in with the config's identity provider (inbox.oidc) and answer the " +
        'calls that wait for them (tenants.<t>.approvers); runs until stopped',
    )
    .option(
      '--temporal-ui <url>',
      "the Temporal UI's address as browsers reach it (default inbox.temporalUi): links to each job, and the one " +
        'origin whose pages may call the codec server (/codec) with a person’s sign-in',
      urlArg,
    )
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
          data: jc.data,
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
        const ui = opts.temporalUi ?? cfg.inbox?.temporalUi;
        process.stdout.write(
          `oz0 inbox: the Temporal UI's codec server is ${inbox.url}/codec` +
            (ui
              ? ` (for ${ui}: set it as the UI's codec endpoint, with cross-origin credentials included)\n`
              : ' (name the Temporal UI with --temporal-ui or inbox.temporalUi: no other page may call it)\n'),
        );
        await new Promise<void>((resolve) => {
          process.once('SIGINT', resolve);
          process.once('SIGTERM', resolve);
        });
        await inbox.close();
      });
    });
  withConfig(inboxCommand.command('decodes'))
    .description('the decode record: who read which jobs decoded in the Temporal UI, and when (SPEC D5); oldest first')
    .option('--since <when>', 'only from this time on (an ISO date or time)')
    .option('--json', 'print JSON (every field)')
    .action(async (opts: ConfigOpts & { since?: string; json?: boolean }) => {
      const cfg = await config(opts);
      const since = opts.since === undefined ? undefined : Date.parse(opts.since);
      if (since !== undefined && Number.isNaN(since))
        throw new UsageError(`--since: not a date or time: ${opts.since}`);
      const [{ decodeRecordFile, readDecodeRecord }, { table }] = await Promise.all([
        import('../inbox/codec.js'),
        import('../../common/text.js'),
      ]);
      const file = decodeRecordFile(cfg);
      const { records, unreadable } = readDecodeRecord(file);
      const shown = records.filter((r) => since === undefined || Date.parse(r.at) >= since);
      if (unreadable) process.stderr.write(`oz0: ${unreadable} lines of ${file} are not decode records: left out\n`);
      print(shown, opts.json, () =>
        shown.length
          ? table(
              ['AT', 'WHO', 'OPENED', 'OF', 'JOBS', 'GIVEN BACK SEALED'],
              shown.map((r) => [
                r.at,
                r.who,
                `${r.opened} (${r.op})`,
                r.tenants.join(', ') || '-',
                r.jobs.join(', ') || '-',
                r.refused
                  ? `${r.refused} (${[...r.refusedTenants, ...(r.lacking ?? []).map((k) => `key ${k}`)].join(', ')})`
                  : '-',
              ]),
            ).join('\n')
          : `nothing decoded yet (${file})`,
      );
    });
}
