/**
 * The Temporal server settings that docker-compose.yml and `npm run cluster` share, read from deploy/temporal/
 * (settings.json and dynamicconfig.yaml), and the pinned versions of what the local cluster builds.
 */
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { projectRoot } from '../../common/paths';

/** The Temporal server built from its Go module (go.temporal.io/server): `cmd/server` and `cmd/tools/sql`. */
export const TEMPORAL_SERVER_VERSION = '1.32.2';
/** The UI server the Temporal CLI 1.9.1 embeds (github.com/temporalio/ui-server/v2, assets included). */
export const TEMPORAL_UI_VERSION = '2.54.1';
/** go.temporal.io/server needs a newer Go than the machine's; the go command fetches this one from the proxy. */
export const GO_TOOLCHAIN = 'go1.27.3';

const SettingsSchema = z.strictObject({
  /** Fixed when the database is first set up: a cluster cannot change it later. */
  numHistoryShards: z.number().int().min(1).max(16384),
  namespace: z.string().min(1),
  /** How long closed jobs' histories are kept (a Go duration, as auto-setup's DEFAULT_NAMESPACE_RETENTION). */
  retention: z.string().regex(/^\d+h$/, 'hours, e.g. 24h'),
  /** oz0's search attributes (SPEC T3): each node registers them itself; listed here so both setups say so. */
  searchAttributes: z.record(z.string(), z.enum(['Keyword', 'KeywordList'])),
});
export type ServerSettings = z.infer<typeof SettingsSchema>;

export function settingsDir(root = projectRoot()): string {
  return path.join(root, 'deploy', 'temporal');
}

export function readServerSettings(root = projectRoot()): ServerSettings {
  const file = path.join(settingsDir(root), 'settings.json');
  const parsed = SettingsSchema.safeParse(JSON.parse(fs.readFileSync(file, 'utf8')));
  if (!parsed.success) throw new Error(`${file}: ${parsed.error.issues.map((i) => i.message).join('; ')}`);
  return parsed.data;
}

/** The dynamic config file both setups load. */
export function dynamicConfigFile(root = projectRoot()): string {
  return path.join(settingsDir(root), 'dynamicconfig.yaml');
}

/** Hours of a `24h` retention, for the namespace registration. */
export function retentionSeconds(settings: ServerSettings): number {
  return Number(settings.retention.slice(0, -1)) * 3600;
}
