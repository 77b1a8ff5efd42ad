/** `oz0 plugin test SERVER [--drill]`: the drill (plugin/drill) as a command. */
import type { Command } from 'commander';
import type { PluginTestReport } from '../../plugin/drill/report';
import { UsageError, config, print, serverArg, withConfig } from './common';
import type { ConfigOpts } from './common';

export function registerPluginCommands(program: Command): void {
  const plugin = program.command('plugin').description('check an MCP server the way oz0 will use it');
  withConfig(plugin.command('test'))
    .description(
      "check a server's listing (and the drill file's sample calls); with --drill, that a write made again under " +
        'its key is made once. Exit 1 on an error finding or a failed case',
    )
    .argument('<server>', 'server name from the config', serverArg)
    .option('--drill', 'run the drill: every write made again under its key, against its drill file')
    .option('--drill-file <file>', 'the drill file (default: oz0.drill.json in the config’s folder)')
    .option(
      '--tenant <tenant>',
      "a per-tenant remote server: open it with this tenant's own credentials, and say which and what it asked for; " +
        "a server whose args or env name {tenant}: open this tenant's own",
    )
    .option('--json', 'print JSON')
    .action(
      async (
        server: string,
        opts: ConfigOpts & { drill?: boolean; drillFile?: string; tenant?: string; json?: boolean },
      ) => {
        const cfg = await config(opts);
        const { namesTenant, perTenant } = await import('../../common/config.js');
        if (!Object.hasOwn(cfg.servers, server))
          throw new UsageError(`the config (${cfg.source}) has no server named "${server}"`);
        const target = cfg.servers[server];
        if (perTenant(target)) {
          if (!opts.tenant)
            throw new UsageError(`server "${server}" takes each tenant's own credentials: name one with --tenant`);
          if (!Object.hasOwn(cfg.tenants, opts.tenant) || !Object.hasOwn(cfg.tenants[opts.tenant].credentials, server))
            throw new UsageError(
              `tenant ${opts.tenant} has no credentials for server "${server}" (tenants.${opts.tenant}.credentials.${server})`,
            );
        }
        if (namesTenant(target) && !opts.tenant)
          throw new UsageError(`server "${server}" names {tenant} in its args or env: name the tenant with --tenant`);
        if ('command' in target && target.package) {
          // S1: installed now if no node installed it yet (once), saying so on stderr: stdout is the report.
          const { installPackages } = await import('../../activities/packages.js');
          await installPackages(cfg, { only: [server], log: (line) => process.stderr.write(`${line}\n`) });
        }
        const [{ DrillFileError }, { pluginTest }, { formatReport }, { openServer }] = await Promise.all([
          import('../../plugin/drill/drill-file.js'),
          import('../../plugin/drill/plugin-test.js'),
          import('../../plugin/drill/report.js'),
          import('../open-server.js'),
        ]);
        let report: PluginTestReport;
        try {
          report = await pluginTest(cfg, server, opts, openServer);
        } catch (err) {
          if (err instanceof DrillFileError) throw new UsageError(err.message);
          throw err;
        }
        print(report, opts.json, () => formatReport(report));
        if (!report.ok) process.exitCode = 1;
      },
    );
}
