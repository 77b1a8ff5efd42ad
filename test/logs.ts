/**
 * Quiet by default (STYLE.md): the nodes' logs of a test run go to one file per test file, under
 * `.oz0/test-logs/<run>/`, and the summary reporter prints the part a failing test wrote. Each test's part starts
 * with a marker line, written before the test runs.
 */
import fs from 'node:fs';
import path from 'node:path';

const ROOT = path.resolve(__dirname, '..');

/** The folder of this run's logs; global-setup names the run, and every jest worker inherits it. */
export function runLogDir(run = process.env.OZ0_TEST_RUN ?? 'adhoc'): string {
  return path.join(ROOT, '.oz0', 'test-logs', run);
}

/** The log file of one test file. */
export function logFileOf(testPath: string, run?: string): string {
  const rel = path.relative(ROOT, testPath).replace(/[\\/]/g, '__');
  return path.join(runLogDir(run), `${rel}.log`);
}

/** The line that opens a test's part of the log. */
export function marker(testName: string): string {
  return `--- test: ${testName}`;
}

/** Writes a test's marker into its file's log. */
export function markTest(testPath: string, testName: string): void {
  const file = logFileOf(testPath);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.appendFileSync(file, `${marker(testName)}\n`);
}
