/**
 * F1: the node sets the fairness key of a job started without it; a job that ended before the node got there needs
 * nothing set and leaves no line in the node's log (a flood's jobs end by the hundred), while a real failure still
 * warns. Against the file's real Temporal, whose answers are what the node tells apart.
 */
import { setFairnessKey } from '../../activities/fairness-key';
import { createLogger } from '../../common/logger';
import type { JobSpec } from '../../model/schemas';
import { testClient, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

/** A logger that keeps its lines, at debug. */
function keptLog() {
  const lines: Array<{ level: number; msg: string; err?: string }> = [];
  const logger = createLogger({
    level: 'debug',
    destination: { write: (line: string) => void lines.push(JSON.parse(line)) },
  });
  return { logger, warnings: () => lines.filter((l) => l.level >= 40), lines };
}

/** A job run started on a queue no node polls (nothing runs it), with no fairness key. */
async function startPlain(spec: JobSpec) {
  const handle = await temporal.client.workflow.start('job', {
    taskQueue: uniqueId('nobody'),
    workflowId: uniqueId('plain'),
    args: [spec],
  });
  return { handle, run: { workflowId: handle.workflowId, runId: handle.firstExecutionRunId } };
}

test('F1: a job that ended before its node set its fairness key leaves no line; a running one gets its key', async () => {
  const spec: JobSpec = { tenant: uniqueId('t'), steps: [] };
  const { logger, warnings, lines } = keptLog();

  // Control: a running job gets its key, which Temporal then shows.
  const running = await startPlain(spec);
  await setFairnessKey({ client: temporal.client, logger }, running.run, spec);
  expect((await running.handle.describe()).raw.workflowExecutionInfo?.priority?.fairnessKey).toBe(spec.tenant);
  expect(lines.some((l) => l.msg === 'job started without its fairness key: set it')).toBe(true);

  // Ended (Temporal: `workflow execution already completed`), and a run Temporal does not know: silence.
  const ended = await startPlain(spec);
  await ended.handle.terminate('ended before its node got there');
  await setFairnessKey({ client: temporal.client, logger }, ended.run, spec);
  await setFairnessKey({ client: temporal.client, logger }, { workflowId: uniqueId('gone'), runId: '' }, spec);
  await running.handle.terminate();
  expect(warnings()).toEqual([]);
});

test("F1 (control): a real failure to set a job's fairness key still warns, NOT_FOUND of a namespace included", async () => {
  const spec: JobSpec = { tenant: uniqueId('t'), steps: [] };
  const { logger, warnings } = keptLog();
  const { run, handle } = await startPlain(spec);
  // The same gRPC code as an ended run, but a namespace that does not exist: a node set up wrong, worth its line.
  const elsewhere = testClient(temporal.connection, uniqueId('nonesuch'));
  await setFairnessKey({ client: elsewhere, logger }, run, spec);
  await handle.terminate();
  expect(warnings()).toEqual([
    expect.objectContaining({ msg: "could not set the job's fairness key", err: expect.stringMatching(/not found/i) }),
  ]);
});
