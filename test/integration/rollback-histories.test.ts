/**
 * N6, the way back (issue 56): a deploy of this release may be rolled back while jobs run. A node of this release
 * with `upgrade.rollbackSafe` records a history of every kind of job (the recorder of previous-histories.test.ts, run
 * on this checkout: plain calls, a scripted session, a harness's and an external live session, calls a person
 * approved and denied, a job continued as new, one cancelled mid-call, a tenant's policy), and the previous release's
 * own bundle replays each: a node of that release can take every one of those jobs over. On the server's side: the
 * approved job's history holds no marker of this release. The control: the same approved job recorded without
 * `rollbackSafe` holds this release's markers, and the previous bundle's replay of it fails, naming the kind.
 */
import fs from 'node:fs';
import path from 'node:path';
import { temporal as proto } from '@temporalio/proto';
import { Worker } from '@temporalio/worker';
import type { WorkflowBundleOption } from '@temporalio/worker';
import { tracingWorkerOptions } from '../../worker/telemetry';
import { RECORDED_KINDS, recordHistories, replayingAcrossReleases } from '../helpers/previous-release';
import { ROOT, tmpDir, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();
const { dir: previousDir, withPrevious } = replayingAcrossReleases('rollback-histories.test.ts');

/** Payloads as the previous release writes and reads them (upgrade.rollbackSafe asks for these). */
const payloads = { store: 'off', seal: 'off' };
const safe = tmpDir('oz0-rollback-safe-');
const unsafe = tmpDir('oz0-rollback-unsafe-');

beforeAll(async () => {
  if (!previousDir) return;
  const where = temporal.config({}).temporal;
  await recordHistories(ROOT, safe, where, { config: { payloads, upgrade: { rollbackSafe: true } } });
  await recordHistories(ROOT, unsafe, where, { config: { payloads }, only: ['approved'], tenant: 'globex' });
}, 540_000);

/** The previous release's own workflow bundle, as its nodes run it (traced or not). */
function previousBundle(traced: boolean): WorkflowBundleOption {
  const file = traced ? 'workflow-bundle-traced.js' : 'workflow-bundle.js';
  return { codePath: path.join(previousDir, 'dist', file) };
}

function historyOf(dir: string, kind: string): proto.api.history.v1.History {
  return proto.api.history.v1.History.decode(fs.readFileSync(path.join(dir, `${kind}.history`)));
}

async function replay(dir: string, kind: string, traced: boolean): Promise<void> {
  try {
    await Worker.runReplayHistory(
      // As a node of that release runs it: its bundle, no codec (it seals nothing and opens nothing sealed).
      { workflowBundle: previousBundle(traced), sinks: tracingWorkerOptions().sinks },
      historyOf(dir, kind),
      kind,
    );
  } catch (err) {
    throw new Error(
      `${kind}, recorded by this release, does not replay on the previous release's bundle: ${(err as Error).message}`,
    );
  }
}

/** The changes (patches, the SDK's `core_patch` markers) a history marks, by name. */
function markersOf(history: proto.api.history.v1.History): string[] {
  return (history.events ?? []).flatMap((e) => {
    const marker = e.markerRecordedEventAttributes;
    const data = marker?.markerName === 'core_patch' ? marker.details?.['patch-data']?.payloads?.[0]?.data : undefined;
    return data ? [String((JSON.parse(Buffer.from(data).toString()) as { id: string }).id)] : [];
  });
}

/**
 * Untraced, every kind; traced, every kind but the two with a person's answer (an Update): the previous release's
 * traced bundle does not replay even its own untraced histories of those ("Timer machine does not handle this event:
 * WorkflowExecutionUpdateCompleted", tried by hand on its recording of job-approved) — a limit of that release's
 * tracing, not of what this one writes; its nodes all trace or none does.
 */
const cases = RECORDED_KINDS.flatMap(
  (kind): Array<readonly [string, boolean]> =>
    kind === 'job-approved' || kind === 'job-denied'
      ? [[kind, false] as const]
      : [[kind, false] as const, [kind, true] as const],
);

withPrevious.each(cases)(
  'N6: %s, recorded by this release with upgrade.rollbackSafe, replays on the previous release’s bundle (traced: %s)',
  async (kind, traced) => {
    await replay(safe, kind, traced);
  },
);

withPrevious(
  'N6: a job that waited for a person under upgrade.rollbackSafe marks none of this release’s changes',
  () => {
    expect(markersOf(historyOf(safe, 'job-approved'))).toEqual([]);
    // It waited, was answered, and its call was made: the history is a whole job's, not an empty one.
    const events = historyOf(safe, 'job-approved').events ?? [];
    expect(events.some((e) => e.workflowExecutionUpdateAcceptedEventAttributes)).toBe(true);
    expect(events.some((e) => e.workflowExecutionCompletedEventAttributes)).toBe(true);
  },
);

withPrevious(
  'N6, the control: the same job recorded without rollbackSafe marks this release’s changes, and the previous bundle cannot replay it',
  async () => {
    const history = historyOf(unsafe, 'job-approved');
    expect(markersOf(history)).toEqual(expect.arrayContaining(['oz0-approval-notices', 'oz0-waiting-memo']));
    await expect(replay(unsafe, 'job-approved', false)).rejects.toThrow(
      /^job-approved, recorded by this release, does not replay on the previous release's bundle: .*([Nn]ondeterminism|TMPRL1100)/s,
    );
  },
  120_000,
);
