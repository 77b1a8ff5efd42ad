/** `oz0 tool kill|revive` (kill switches) and `oz0 policy show|set|approve|revoke`. */
import type { Command } from 'commander';
import type { Decision } from '../../model/schemas';
import {
  UsageError,
  config,
  confirm,
  decisionArg,
  patternArg,
  print,
  serverArg,
  tenantArg,
  withConfig,
  withJobClient,
} from './common';
import type { ConfigOpts } from './common';

/** What these commands run, loaded when one runs: the policy workflow's client, its Updates and its rules. */
async function policyModules() {
  const [client, updates, { ALL_TENANTS }] = await Promise.all([
    import('../../common/policy-client.js'),
    import('../../model/messages.js'),
    import('../../model/policy-rules.js'),
  ]);
  return { ...client, ...updates, ALL_TENANTS };
}

export function registerToolCommands(program: Command): void {
  const tool = program.command('tool').description('kill switches');
  for (const [name, update, verb] of [
    ['kill', 'killUpdate', 'stop every running call of TOOL and refuse new ones until revived'],
    ['revive', 'reviveUpdate', 'take the kill switch of TOOL off again'],
  ] as const) {
    withConfig(tool.command(name))
      .description(`${verb} (TOOL: server.function, server.* or *; every tenant unless --tenant)`)
      .argument('<tool>', 'tool or pattern', patternArg)
      .option('--tenant <tenant>', 'only this tenant', tenantArg)
      .option('--json', 'print JSON')
      .action(async (pattern: string, opts: ConfigOpts & { tenant?: string; json?: boolean }) => {
        const cfg = await config(opts);
        const policy = await policyModules();
        const { ALL_TENANTS } = policy;
        await withJobClient(cfg, async (jc) => {
          const tenant = opts.tenant ?? ALL_TENANTS;
          const state = await policy.changePolicy(policy.policyTargetOf(cfg, jc.client), tenant, policy[update], [
            pattern,
          ]);
          const who = tenant === ALL_TENANTS ? 'every tenant' : `tenant ${tenant}`;
          print(
            { tenant, kills: state.kills },
            opts.json,
            () => `${pattern}: ${name === 'kill' ? 'killed' : 'revived'} for ${who}`,
          );
        });
      });
  }
}

export function registerPolicyCommands(program: Command): void {
  const policy = program.command('policy').description("a tenant's policy and approvals");
  withConfig(policy.command('show'))
    .description(
      "the tenant's policy (each pattern from the config or set by a command), kill switches and approved listings",
    )
    .argument('<tenant>', 'tenant', tenantArg)
    .option('--json', 'print JSON')
    .action(async (tenant: string, opts: ConfigOpts & { json?: boolean }) => {
      const cfg = await config(opts);
      const [{ policyTargetOf, readOrigins, readPolicy, ALL_TENANTS }, { formatPolicy }, { policySources }] =
        await Promise.all([policyModules(), import('../format.js'), import('../../model/origins.js')]);
      await withJobClient(cfg, async (jc) => {
        const target = policyTargetOf(cfg, jc.client);
        const [{ state, origins }, all] = await Promise.all([
          readOrigins(target, tenant),
          readPolicy(target, ALL_TENANTS),
        ]);
        // A13: each pattern's source: the config that seeded it, or a command.
        const shown = { tenant, ...state, policySources: policySources(state, origins), killsForAllTenants: all.kills };
        print(shown, opts.json, () => formatPolicy(shown));
      });
    });
  withConfig(policy.command('set'))
    .description(
      "allow, deny, ask or confirm (each call waits for a person's yes) for a tool pattern (server.function, server.* or *)",
    )
    .argument('<tenant>', 'tenant', tenantArg)
    .argument('<pattern>', 'tool pattern', patternArg)
    .argument('<decision>', 'allow | deny | ask | confirm', decisionArg)
    .action(async (tenant: string, pattern: string, decision: Decision, opts: ConfigOpts) => {
      const cfg = await config(opts);
      const { changePolicy, policyTargetOf, setPolicyUpdate } = await policyModules();
      await withJobClient(cfg, async (jc) => {
        await changePolicy(policyTargetOf(cfg, jc.client), tenant, setPolicyUpdate, [pattern, decision]);
        process.stdout.write(`${tenant}: ${pattern} ${decision}\n`);
      });
    });
  withConfig(policy.command('approve'))
    .description("show a server's listing and its digest, then approve exactly that listing")
    .argument('<tenant>', 'tenant', tenantArg)
    .argument('<server>', 'server name from the config', serverArg)
    .option('--yes', 'do not ask')
    .action(async (tenant: string, server: string, opts: ConfigOpts & { yes?: boolean }) => {
      const cfg = await config(opts);
      const [{ createLogger }, { approveListing, formatListing, readListing }, { policyTargetOf }] = await Promise.all([
        import('../../common/logger.js'),
        import('../approve.js'),
        policyModules(),
      ]);
      // A per-tenant server lists to each tenant as its own credentials let it (R1).
      const listing = await readListing(cfg, createLogger({ level: 'warn' }), server, tenant);
      process.stdout.write(`${formatListing(listing)}\n`);
      if (!opts.yes && !(await confirm(`Approve exactly this listing of ${server} for ${tenant}? [y/N] `))) {
        throw new UsageError('not approved');
      }
      await withJobClient(cfg, async (jc) => {
        await approveListing(policyTargetOf(cfg, jc.client), tenant, listing);
        process.stdout.write(`${tenant}: approved ${server} at ${listing.digest}\n`);
      });
    });
  withConfig(policy.command('revoke'))
    .description("take back the approval of a server's listing")
    .argument('<tenant>', 'tenant', tenantArg)
    .argument('<server>', 'server name', serverArg)
    .action(async (tenant: string, server: string, opts: ConfigOpts) => {
      const cfg = await config(opts);
      const { changePolicy, policyTargetOf, revokeUpdate } = await policyModules();
      await withJobClient(cfg, async (jc) => {
        await changePolicy(policyTargetOf(cfg, jc.client), tenant, revokeUpdate, [server]);
        process.stdout.write(`${tenant}: revoked ${server}\n`);
      });
    });
}
