/**
 * D3: a workflow task that fails the same way on every try is never retried in silence: the node says once which job
 * is stuck, why and what would free it, and quiets the SDK's own lines for each further try; `oz0 job status` says
 * `stuck` with the same reason. The case an operator meets: a node not given the payload store the job's history
 * names (its spec was stored by a client that has it). The control: a node with the store takes the job over, and it
 * completes.
 */
import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import { connectJobClient, jobStatus, startJob, stuckOf } from '../../client/jobs';
import { createNode } from '../../worker/node';
import { readReceived } from '../../examples/common';
import { createLogger } from '../../common/logger';
import pino from 'pino';
import path from 'node:path';
import { eventually, example, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

test('D3: a job whose workflow task fails on every try is said once by its node, and `oz0 job status` says stuck, why and what frees it; a node with the store frees it (the control)', async () => {
  const log = path.join(tmpDir(), 'pages.jsonl');
  const config = temporal.config({
    servers: { pages: { command: 'node', args: [example('pages')], env: { OZ0_RECEIVED_LOG: log } } },
  });
  const jc = await connectJobClient(config);
  const id = uniqueId('stuck');
  // Its spec, past the threshold, lies in the store: history holds its claim. Random: sealing deflates (D4).
  const steps = [{ call: 'pages.read_page', args: { kib: 1, note: randomBytes(300 * 1024).toString('base64') } }];
  const started = await startJob(jc, { tenant: uniqueId('acme'), steps }, { workflowId: id });
  const nodeLog = path.join(tmpDir(), 'node.log');
  const nodeLogger = createLogger({ level: 'info', destination: pino.destination({ dest: nodeLog, sync: true }) });
  const storeless = { ...config, payloads: { ...config.payloads, store: 'off' as const } };
  const off = await createNode({ config: storeless, logger: nodeLogger });
  try {
    await off.runUntil(async () => {
      const stuck = await eventually(() => stuckOf(jc.client, id), 60_000, 'the job to be stuck');
      expect(await jobStatus(jc.client, id)).toBe('stuck');
      expect(stuck.tries).toBeGreaterThanOrEqual(3);
      expect(stuck.why).toMatch(/TMPRL1105.*external storage is not configured/);
      expect(stuck.remedy).toMatch(/payloads\.store/);
      // One more try, so that the quiet is seen.
      await eventually(async () => ((await stuckOf(jc.client, id))!.tries > stuck.tries ? true : undefined), 30_000);
    });
  } finally {
    await jc.close().catch(() => undefined);
  }
  const lines = fs
    .readFileSync(nodeLog, 'utf8')
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l) as { level: number; msg: string; jobId?: string; runId?: string });
  const said = lines.filter((l) => /is stuck/.test(l.msg));
  expect(said).toHaveLength(1);
  expect(said[0]).toMatchObject({ level: 50, jobId: id, runId: started.firstExecutionRunId });
  expect(said[0].msg).toMatch(/failed \d+ times the same way.*TMPRL1105.*payloads\.store/);
  // The SDK's own line for each try: at error level for the first tries alone, then quiet (debug, not written here).
  const sdkLines = lines.filter((l) => l.level >= 40 && l.runId === started.firstExecutionRunId && l !== said[0]);
  expect(sdkLines.length).toBeLessThanOrEqual(3);

  // The control: a node given the store reads the claim, and the job goes on to its end.
  const jc2 = await connectJobClient(config);
  const node = await createNode({ config, logger });
  try {
    await node.runUntil(async () => {
      await jc2.client.workflow.getHandle(id).result();
      expect(await jobStatus(jc2.client, id)).toBe('COMPLETED');
    });
  } finally {
    await jc2.close();
  }
  expect(readReceived(log)).toHaveLength(1);
}, 180_000);
