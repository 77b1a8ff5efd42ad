/**
 * How other programs find a running `npm run cluster` and act on it: `<state>/control.json` says its pid, its
 * Temporal address and the Temporal server's pid, and counts the server's restarts. SIGUSR2 to the script kills
 * the Temporal server (kill -9) and starts it again, as the tests that prove durability across a server restart do
 * (test/helpers/temporal.ts); the bench reads the server's pid to count its CPU.
 */
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { projectRoot } from '../../common/paths';

const ControlSchema = z.strictObject({
  pid: z.number().int(),
  address: z.string(),
  temporalPid: z.number().int(),
  restarts: z.number().int(),
});
export type ClusterControl = z.infer<typeof ControlSchema>;

/** `.oz0/cluster` in the project; OZ0_CLUSTER_DIR elsewhere (as root, the postgres user must reach it). */
export function defaultStateDir(root = projectRoot()): string {
  return process.env.OZ0_CLUSTER_DIR ? path.resolve(process.env.OZ0_CLUSTER_DIR) : path.join(root, '.oz0', 'cluster');
}

export function writeControl(stateDir: string, control: ClusterControl): void {
  const file = path.join(stateDir, 'control.json');
  fs.writeFileSync(`${file}.new`, `${JSON.stringify(control)}\n`);
  fs.renameSync(`${file}.new`, file);
}

/** The running cluster serving `address`, if there is one. */
export function readControl(address: string, stateDir = defaultStateDir()): ClusterControl | undefined {
  try {
    const control = ControlSchema.parse(JSON.parse(fs.readFileSync(path.join(stateDir, 'control.json'), 'utf8')));
    process.kill(control.pid, 0);
    return control.address === address ? control : undefined;
  } catch {
    return undefined;
  }
}

/** Has the cluster kill -9 its Temporal server and start it again; resolves once the new one answers. */
export async function restartClusterTemporal(address: string, timeoutMs = 120_000): Promise<void> {
  const before = readControl(address);
  if (!before) throw new Error(`no running \`npm run cluster\` serves ${address}: nothing can restart its server`);
  process.kill(before.pid, 'SIGUSR2');
  const deadline = Date.now() + timeoutMs;
  while ((readControl(address)?.restarts ?? before.restarts) === before.restarts) {
    if (Date.now() > deadline) throw new Error(`the cluster's Temporal server did not come back at ${address}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}
