/**
 * N6 (issue 56.2): no hand-kept fixtures between releases. A node of the previous release (its commit named once, in
 * deploy/previous-release.ts, built from this repository's history) records a history of every kind of job it
 * runs (test/fixtures/previous/record.js): plain calls with an error result, a scripted session, a harness's live
 * session, an external session driven by its client, calls a person approved and denied, a job continued as new (its
 * first run and its last), a job cancelled mid-call, and a tenant's policy. Today's bundle replays each, on a node that
 * traces and one that does not, with a sealing converter; a change that would break a recorded job fails here naming
 * the job's kind and the event. The control: a bundle with one deliberately incompatible change (a timer before a
 * job's first call) fails the same replay.
 */
import fs from 'node:fs';
import path from 'node:path';
import { temporal as proto } from '@temporalio/proto';
import { DefaultLogger, Worker, bundleWorkflowCode } from '@temporalio/worker';
import type { WorkflowBundleOption } from '@temporalio/worker';
import { workflowBundle } from '../../worker/bundle';
import { tracingWorkerOptions } from '../../worker/telemetry';
import { parseConfig } from '../../common/config';
import { processDataOf } from '../../data';
import { RECORDED_KINDS, recordHistories, replayingAcrossReleases } from '../helpers/previous-release';
import { ROOT, testKeys, tmpDir, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();
const { dir: previousDir, withPrevious } = replayingAcrossReleases('previous-histories.test.ts');

const KINDS = RECORDED_KINDS;
const out = tmpDir('oz0-previous-histories-');

beforeAll(async () => {
  if (!previousDir) return;
  await recordHistories(previousDir, out, temporal.config({}).temporal);
}, 300_000);

const sealing = () =>
  processDataOf({ ...parseConfig({ payloads: { store: 'off', seal: { folder: testKeys() } } }), baseDir: ROOT })
    .dataConverter;

/** Replays one recorded kind; a failure names the kind before the SDK's words (the event, the command). */
async function replay(kind: string, bundle: WorkflowBundleOption): Promise<void> {
  const history = proto.api.history.v1.History.decode(fs.readFileSync(path.join(out, `${kind}.history`)));
  try {
    await Worker.runReplayHistory(
      { workflowBundle: bundle, sinks: tracingWorkerOptions().sinks, dataConverter: sealing() },
      history,
      kind,
    );
  } catch (err) {
    throw new Error(
      `${kind}, recorded by the previous release, does not replay on this bundle: ${(err as Error).message}`,
    );
  }
}

const cases = KINDS.flatMap((kind) => [[kind, false] as const, [kind, true] as const]);

withPrevious.each(cases)(
  'N6: %s, recorded by the previous release, replays on today’s bundle (traced: %s)',
  async (kind, traced) => {
    await replay(kind, await workflowBundle(traced));
  },
);

withPrevious(
  'N6, the control: a deliberately incompatible change (a timer before a job’s first call) fails the replay, naming the kind',
  async () => {
    // Today's workflows, copied beside the project (so their imports resolve) with one change a recorded job cannot take.
    const copy = fs.mkdtempSync(path.join(ROOT, '.oz0', 'incompatible-'));
    try {
      for (const dir of ['workflows', 'model'])
        fs.cpSync(path.join(ROOT, dir), path.join(copy, dir), { recursive: true });
      const jobFile = path.join(copy, 'workflows', 'job.ts');
      const source = fs.readFileSync(jobFile, 'utf8');
      const changed = source
        .replace(/^/, "import { sleep as incompatibleSleep } from '@temporalio/workflow';\n")
        .replace(
          'export async function job(input: unknown, carry?: JobCarry): Promise<JobTrace> {\n',
          'export async function job(input: unknown, carry?: JobCarry): Promise<JobTrace> {\n  await incompatibleSleep(1);\n',
        );
      expect(changed).toContain('await incompatibleSleep(1);');
      fs.writeFileSync(jobFile, changed);
      const bundle = await bundleWorkflowCode({
        workflowsPath: path.join(copy, 'workflows', 'index.ts'),
        failureConverterPath: path.join(copy, 'model', 'failure-converter.ts'),
        logger: new DefaultLogger('ERROR'),
      });
      await expect(replay('job-plain', bundle)).rejects.toThrow(
        /^job-plain, recorded by the previous release, does not replay on this bundle: .*([Nn]ondeterminism|TMPRL1100)/s,
      );
      // The policy's workflow did not change: it still replays on the same bundle.
      await replay('policy-acme', bundle);
    } finally {
      fs.rmSync(copy, { recursive: true, force: true });
    }
  },
  180_000,
);
