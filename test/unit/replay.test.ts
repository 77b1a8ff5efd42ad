/**
 * T5: workflow code is replayed, so a change must not alter the commands an existing history recorded. These
 * histories were recorded by the oz0 from before calls a person approves (A4-A7) — plain calls with an error result,
 * a scripted session, a harness's live session, a job cancelled mid-call, and a tenant's policy workflow with its
 * updates — and today's workflow bundle must replay each without a nondeterminism error. They are the binary
 * protobuf of each `History` as that version's client fetched it.
 *
 * The `traced-*` ones were recorded by a node that traced (O2: OTEL_EXPORTER_OTLP_ENDPOINT set, spans' context in
 * the activities' headers, `record.js` run on the dist/ of issue 27): they replay here on a worker with no tracing at
 * all, as on a node that traces nothing — the workflow side of tracing is in every bundle (workflows/tracing.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import { temporal } from '@temporalio/proto';
import { DefaultLogger, Runtime, Worker, makeTelemetryFilterString } from '@temporalio/worker';
import { workflowBundle } from '../../worker/bundle';
import { tracingWorkerOptions } from '../../worker/telemetry';

// Replay workers announce each state change, and the tampered history below makes the SDK's core warn of the
// nondeterminism it is meant to find: a person reading npm test's output needs neither, only errors.
Runtime.install({
  logger: new DefaultLogger('ERROR'),
  telemetryOptions: { logging: { filter: makeTelemetryFilterString({ core: 'ERROR' }), forward: {} } },
});

const DIR = path.join(__dirname, '..', 'fixtures', 'histories');
/** As on a node that traces nothing: the workflow side of tracing hands its spans to a sink that drops them. */
const replayOptions = async () => ({ workflowBundle: await workflowBundle(), sinks: tracingWorkerOptions().sinks });

test.each(fs.readdirSync(DIR).filter((f) => f.endsWith('.history')))(
  'T5: %s, recorded by an earlier oz0 (before A4, or traced), replays under today’s workflows',
  async (file) => {
    const history = temporal.api.history.v1.History.decode(fs.readFileSync(path.join(DIR, file)));
    await Worker.runReplayHistory(await replayOptions(), history, file);
  },
  60_000,
);

test('T5: a positive control — a history whose recorded command is not what the code does is refused', async () => {
  const history = temporal.api.history.v1.History.decode(fs.readFileSync(path.join(DIR, 'job-plain.history')));
  const scheduled = history.events!.find((e) => e.activityTaskScheduledEventAttributes?.activityType)!;
  scheduled.activityTaskScheduledEventAttributes!.activityType!.name = 'someOtherActivity';
  await expect(Worker.runReplayHistory(await replayOptions(), history, 'tampered')).rejects.toThrow(
    /[Nn]ondeterminism|DeterminismViolation/,
  );
}, 60_000);
