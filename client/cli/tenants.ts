/** `oz0 tenant status|set`: a tenant's share of the platform (SPEC F5). */
import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { UsageError, config, print, serverArg, tenantArg, withConfig, withJobClient } from './common';
import type { ConfigOpts } from './common';
import type { Shares } from '../../model/shares';

/** A number within bounds, or `none` where a cap or rate may be taken off. */
function numberArg(what: string, min: number, max: number, opts: { whole?: boolean; none?: boolean } = {}) {
  return (value: string): number | null => {
    if (opts.none && value === 'none') return null;
    const n = Number(value);
    const ok =
      value.trim() !== '' && Number.isFinite(n) && n >= min && n <= max && (!opts.whole || Number.isInteger(n));
    if (!ok) {
      const kind = opts.whole ? 'a whole number' : 'a number';
      throw new InvalidArgumentError(`${what} is ${kind} from ${min} to ${max}${opts.none ? ', or none' : ''}`);
    }
    return n;
  };
}

interface SetOpts extends ConfigOpts {
  weight?: number;
  maxPriority?: number;
  maxRunning?: number | null;
  rate?: number | null;
  server?: string;
  json?: boolean;
}

export function registerTenantCommands(program: Command): void {
  const tenant = program.command('tenant').description("tenants' shares of the platform: weights, caps, rates");
  withConfig(tenant.command('status'))
    .description(
      "each tenant's weight, priority, caps and rates, and its jobs and calls now (running, queued, in line)",
    )
    .argument('[tenant]', 'one tenant (default: every tenant the config names or that has a policy)', tenantArg)
    .option('--json', 'print JSON')
    .action(async (one: string | undefined, opts: ConfigOpts & { json?: boolean }) => {
      const cfg = await config(opts);
      const [{ knownTenants, tenantStatus }, { formatTenants }] = await Promise.all([
        import('../tenants.js'),
        import('../format.js'),
      ]);
      await withJobClient(cfg, async (jc) => {
        const tenants = one ? [one] : await knownTenants(jc.client, Object.keys(cfg.tenants));
        const shown = await Promise.all(tenants.map((t) => tenantStatus(jc.client, jc.policy!, t)));
        print(one ? shown[0] : shown, opts.json, () => formatTenants(shown));
      });
    });
  withConfig(tenant.command('set'))
    .description(
      "change a tenant's weight, highest priority, cap or rate (its own, or with --server one server's): durable, " +
        'and on every node within seconds',
    )
    .argument('<tenant>', 'tenant', tenantArg)
    .option('--weight <w>', 'its weight in fair dispatch (default 1)', numberArg('--weight', 0.001, 1000))
    .option(
      '--max-priority <p>',
      'the highest priority its jobs may ask (1 first … 5)',
      numberArg('--max-priority', 1, 5, { whole: true }),
    )
    .option(
      '--max-running <n>',
      'at most this many of its calls at once, on every node together (none: no cap)',
      numberArg('--max-running', 1, 1_000_000, { whole: true, none: true }),
    )
    .option(
      '--rate <r>',
      'at most this many of its calls start a second, on every node together (none: no rate)',
      numberArg('--rate', 0.001, 1000, { none: true }),
    )
    .option('--server <server>', 'the cap and rate given are for its calls of this server', serverArg)
    .option('--json', 'print JSON')
    .action(async (name: string, opts: SetOpts) => {
      const { weight, maxPriority, maxRunning, rate, server } = opts;
      if ([weight, maxPriority, maxRunning, rate].every((v) => v === undefined))
        throw new UsageError('nothing to change: give --weight, --max-priority, --max-running or --rate');
      if (server && (weight !== undefined || maxPriority !== undefined))
        throw new UsageError("--server sets a server's cap and rate; a weight and priority are the tenant's own");
      const cfg = await config(opts);
      if (server && !Object.hasOwn(cfg.servers, server))
        throw new UsageError(`there is no server "${server}" in the config`);
      const [{ setShares }] = await Promise.all([import('../tenants.js')]);
      await withJobClient(cfg, async (jc) => {
        const change = {
          ...(weight !== undefined ? { weight: weight as number } : {}),
          ...(maxPriority !== undefined ? { maxPriority: maxPriority as number } : {}),
          ...(maxRunning !== undefined ? { maxRunningCalls: maxRunning } : {}),
          ...(rate !== undefined ? { callsPerSecond: rate } : {}),
          ...(server ? { server } : {}),
        };
        const set = await setShares(jc.client, jc.policy!, cfg.temporal, name, change);
        print({ tenant: name, ...set }, opts.json, () => sharesText(name, set.version, set.shares));
      });
    });
}

function sharesText(tenant: string, version: number, shares: Shares): string {
  const limit = (l: { maxRunningCalls?: number; callsPerSecond?: number }) =>
    `cap ${l.maxRunningCalls ?? 'none'}, rate ${l.callsPerSecond === undefined ? 'none' : `${l.callsPerSecond}/s`}`;
  const lines = [
    `${tenant} (policy version ${version}): weight ${shares.weight}, priority ${shares.maxPriority}-5, ${limit(shares.limits)}`,
    ...Object.entries(shares.limits.servers ?? {}).map(([s, l]) => `  calls of ${s}: ${limit(l)}`),
  ];
  return lines.join('\n');
}
