/**
 * T5: workflow code is replayed, so a change must not alter the commands an existing history recorded. These
 * histories were recorded by the oz0 from before calls a person approves (A4-A7) — plain calls with an error result,
 * a scripted session, a harness's live session, a job cancelled mid-call, and a tenant's policy workflow with its
 * updates — and today's workflow bundle must replay each without a nondeterminism error. They are the binary
 * protobuf of each `History` as that version's client fetched it. `shares-capped` is a tenant's limiter (F3) under a
 * flood across two nodes, recorded by caps.test.ts (`OZ0_RECORD_HISTORY=FILE`): its asks, gives, turns and claims.
 *
 * The `traced-*` ones were recorded by a node that traced (O2: OTEL_EXPORTER_OTLP_ENDPOINT set, spans' context in
 * the activities' headers, `record.js` run on the dist/ of issue 27). Only a node that traces has tracing's workflow
 * side in its bundle (worker/bundle.ts), so a job may move between a node that traces and one that does not: every
 * history replays under both bundles — the traced ones without the interceptors that recorded them, the others with
 * interceptors they never had.
 *
 * D6: every one replays with a sealing node's data converter (D4) — the plain ones as they were recorded, before
 * nodes sealed — and the `sealed-*` ones (record-sealed.js: a job and a policy, every payload sealed with the keys in
 * fixtures/histories/keys, a test's, committed for this) replay only with their tenant's keys: without them, the
 * replay fails naming the key it lacks.
 */
import fs from 'node:fs';
import path from 'node:path';
import { temporal } from '@temporalio/proto';
import { DefaultLogger, Runtime, Worker, makeTelemetryFilterString } from '@temporalio/worker';
import { workflowBundle } from '../../worker/bundle';
import { tracingWorkerOptions } from '../../worker/telemetry';
import { parseConfig } from '../../common/config';
import { processDataOf } from '../../data';
import { tmpDir } from '../helpers/temporal';

// Replay workers announce each state change, and the tampered history below makes the SDK's core warn of the
// nondeterminism it is meant to find: a person reading npm test's output needs neither, only errors.
Runtime.install({
  logger: new DefaultLogger('ERROR'),
  telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }), forward: {} } },
});

const DIR = path.join(__dirname, '..', 'fixtures', 'histories');
/** The fixtures' keys, copied: a replay seals what its workflows send, and may make a key for a tenant it meets. */
const KEYS = tmpDir('oz0-replay-keys-');
fs.cpSync(path.join(DIR, 'keys'), KEYS, { recursive: true });
/** A sealing node's data converter, with the keys in `folder` (D4). */
const sealing = (folder: string) =>
  processDataOf({ ...parseConfig({ payloads: { store: 'off', seal: { folder } } }), baseDir: DIR }).dataConverter;
/** As on a node that traces, or one that does not (whose sink drops the spans: worker/telemetry.ts); a node seals. */
const replayOptions = async (traced: boolean, keys = KEYS) => ({
  workflowBundle: await workflowBundle(traced),
  sinks: tracingWorkerOptions().sinks,
  dataConverter: sealing(keys),
});
const histories = fs.readdirSync(DIR).filter((f) => f.endsWith('.history'));
const cases = histories.flatMap((file) => [
  [file, 'a node that traces nothing', false] as const,
  [file, 'a node that traces', true] as const,
]);

test.each(cases)(
  'T5, D6: %s, recorded by an earlier oz0 (before A4, traced, or sealed), replays on %s that seals',
  async (file, _on, traced) => {
    const history = temporal.api.history.v1.History.decode(fs.readFileSync(path.join(DIR, file)));
    await Worker.runReplayHistory(await replayOptions(traced), history, file);
  },
  120_000,
);

test('T5: a positive control — a history whose recorded command is not what the code does is refused', async () => {
  const history = temporal.api.history.v1.History.decode(fs.readFileSync(path.join(DIR, 'job-plain.history')));
  const scheduled = history.events!.find((e) => e.activityTaskScheduledEventAttributes?.activityType)!;
  scheduled.activityTaskScheduledEventAttributes!.activityType!.name = 'someOtherActivity';
  await expect(Worker.runReplayHistory(await replayOptions(false), history, 'tampered')).rejects.toThrow(
    /[Nn]ondeterminism|DeterminismViolation/,
  );
}, 60_000);

test('D6: a positive control — a sealed history replayed by a node without its tenant’s key fails its workflow task', async () => {
  // With the keys it replays (above); without them the workflow cannot read its own input. Why is in the failure, which
  // a node seals with the platform's key like any failure (the stuck job's note reads it: sealed.test.ts).
  const history = temporal.api.history.v1.History.decode(fs.readFileSync(path.join(DIR, 'sealed-job-plain.history')));
  await expect(
    Worker.runReplayHistory(await replayOptions(false, tmpDir('oz0-no-keys-')), history, 'keyless'),
  ).rejects.toThrow(/Replay failed due workflow task failure/);
}, 60_000);
