/** `oz0 key list|rotate`: the keys that seal each tenant's payloads (SPEC D4), read from the config and its key folder. */
import type { Command } from 'commander';
import { UsageError, config, print, tenantArg, withConfig } from './common';
import type { ConfigOpts } from './common';
import type { LoadedConfig } from '../../common/config';

const PLATFORM_NAME = 'the platform';

async function keyRingOf(cfg: LoadedConfig) {
  const { processDataOf } = await import('../../data/index.js');
  const data = processDataOf(cfg);
  return { keys: data.keys, sealsNew: data.sealsNew, PLATFORM: (await import('../../data/owners.js')).PLATFORM };
}

export function registerKeyCommands(program: Command): void {
  const key = program.command('key').description("the keys that seal each tenant's payloads in Temporal (SPEC D4)");
  withConfig(key.command('list'))
    .description("each tenant's keys and the platform's: which one seals new payloads, where each comes from")
    .argument(
      '[tenant]',
      'one tenant (default: the platform, every tenant the config names, every one with keys)',
      tenantArg,
    )
    .option('--json', 'print JSON')
    .action(async (one: string | undefined, opts: ConfigOpts & { json?: boolean }) => {
      const cfg = await config(opts);
      const { keys, PLATFORM } = await keyRingOf(cfg);
      const owners = one ? [one] : [...new Set([PLATFORM, ...Object.keys(cfg.tenants), ...keys.folderOwners()])];
      const listed = owners.flatMap((o) => keys.listed(o));
      const { table } = await import('../../common/text.js');
      print(listed, opts.json, () => {
        const none = owners.filter((o) => !listed.some((k) => k.owner === o));
        const rows = listed.map((k) => [
          k.owner === PLATFORM ? PLATFORM_NAME : k.owner,
          k.id,
          k.seals ? 'seals new payloads' : 'opens older ones',
          k.made ?? '',
          k.from,
        ]);
        return [
          ...(rows.length ? table(['OWNER', 'KEY', 'USE', 'MADE', 'FROM'], rows) : ['no keys yet']),
          ...none.map(
            (o) =>
              `${o === PLATFORM ? PLATFORM_NAME : o} has no key yet: a node makes one in ${keys.folder} on its first payload`,
          ),
        ].join('\n');
      });
    });
  withConfig(key.command('rotate'))
    .description(
      'a new key for a tenant (or --platform) in the key folder: nodes seal its new payloads with it within 10 s, ' +
        'and its older keys still open what they sealed (nothing is rewritten)',
    )
    .argument('[tenant]', 'the tenant', tenantArg)
    .option('--platform', "the platform's own key (its policies, limiters, probes)")
    .option('--json', 'print JSON')
    .action(async (tenant: string | undefined, opts: ConfigOpts & { platform?: boolean; json?: boolean }) => {
      if (!tenant === !opts.platform) throw new UsageError('name a tenant, or give --platform');
      const cfg = await config(opts);
      const { keys, sealsNew, PLATFORM } = await keyRingOf(cfg);
      if (!sealsNew) {
        throw new UsageError(
          `payloads.seal is "off" in ${cfg.source}: new payloads are not sealed, and a new key would seal nothing`,
        );
      }
      const owner = tenant ?? PLATFORM;
      const who = tenant ?? PLATFORM_NAME;
      if (keys.byReference(owner)) {
        const field = tenant ? `tenants.${tenant}.keys` : 'payloads.seal.platformKeys';
        throw new UsageError(
          `${who}'s keys come from the config (${field}): put the new key first there, keeping the older ones after it`,
        );
      }
      const older = keys.keysOf(owner).map((k) => k.id);
      const made = keys.rotate(owner);
      const [listed] = keys.listed(owner);
      print({ owner, id: made.id, file: listed?.from, older }, opts.json, () =>
        [
          `${who}: key ${made.id} (${listed?.from}) seals its new payloads; nodes take it within 10 s.`,
          older.length
            ? `Its older keys ${older.join(', ')} still open what they sealed: keep them as long as its jobs' histories are kept.`
            : 'It had no key before.',
        ].join('\n'),
      );
    });
}
