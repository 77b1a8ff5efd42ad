/** The release before this one (deploy/previous-release.ts), and the recorder of its jobs' histories (N6). */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import path from 'node:path';
import { DefaultLogger, Runtime, makeTelemetryFilterString } from '@temporalio/worker';
import { ROOT } from './temporal';
import { previousRelease } from '../../deploy/previous-release';

export { PREVIOUS_RELEASE, previousRelease } from '../../deploy/previous-release';

/** The kinds of job test/fixtures/previous/record.js records, each a `<kind>.history`. */
export const RECORDED_KINDS = [
  'job-plain',
  'job-scripted',
  'job-harness',
  'job-external',
  'job-approved',
  'job-denied',
  'job-continued-as-new-first-run',
  'job-continued-as-new',
  'job-cancelled',
  'policy-acme',
] as const;

/**
 * Records a history of every kind of job (or those `only` names) with a node of the release in `dir` (the previous
 * release's folder, or this checkout's), on the Temporal server at `where`, into `out`; `config` adds to its node's.
 * A second recording in one namespace names a `tenant` of its own (its policy workflow is the first's otherwise).
 */
export async function recordHistories(
  dir: string,
  out: string,
  where: { address: string; namespace: string },
  options: { config?: object; only?: string[]; tenant?: string } = {},
): Promise<void> {
  const env = {
    ...process.env,
    OZ0_RECORD_ADDRESS: where.address,
    OZ0_RECORD_NAMESPACE: where.namespace,
    ...(options.config && { OZ0_RECORD_CONFIG: JSON.stringify(options.config) }),
    ...(options.only && { OZ0_RECORD_ONLY: options.only.join(',') }),
    ...(options.tenant && { OZ0_RECORD_TENANT: options.tenant }),
  };
  try {
    await promisify(execFile)(
      process.execPath,
      [path.join(ROOT, 'test', 'fixtures', 'previous', 'record.js'), dir, out],
      {
        env,
        timeout: 240_000,
      },
    );
  } catch (err) {
    throw new Error(`the release in ${dir} could not record its jobs: ${(err as { stderr?: string }).stderr ?? err}`);
  }
}

/**
 * For a file that replays across releases: core's warnings off (a replay worker announces each state change, a
 * control's nondeterminism warns), and the previous release built, or `test.skip` with why (said once).
 */
export function replayingAcrossReleases(file: string): { dir: string; withPrevious: typeof test } {
  Runtime.install({
    logger: new DefaultLogger('ERROR'),
    telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }), forward: {} } },
  });
  const previous = previousRelease();
  if ('why' in previous) {
    console.warn(`${file} skipped: ${previous.why}`);
    return { dir: '', withPrevious: test.skip };
  }
  return { dir: previous.dir, withPrevious: test };
}
