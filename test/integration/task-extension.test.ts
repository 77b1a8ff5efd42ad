/**
 * MCP tasks as the extension of 2026-07-28 (SEP-2663, `io.modelcontextprotocol/tasks`; issue 25.3), against a server
 * on the MCP Python SDK that implements it from the specification with the SDK's extension API
 * (examples/python/oz0_tasks.py, served by examples/python/reports.py): its export runs after its first answer, so a
 * node lost mid-task is a real case. Every assertion on what was made is read from the server's own log.
 */
import path from 'node:path';
import { readReceived } from '../../examples/common';
import type { CallProgressState } from '../../model/schemas';
import { createNode } from '../../worker/node';
import { callsOf } from '../../model/job';
import {
  approve,
  eventually,
  heartbeatMentions,
  heartbeatOf,
  logger,
  runJob,
  startOnNodeA,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import { python, pythonExample, pythonMissing, servePythonHttp, withPython } from '../helpers/python';
import type { PythonHttp } from '../helpers/python';

const temporal = useTemporal();
let remote: PythonHttp | undefined;
const remoteLog = path.join(tmpDir(), 'reports-http.jsonl');

beforeAll(async () => {
  if (!python) return;
  remote = await servePythonHttp('reports', { OZ0_RECEIVED_LOG: remoteLog, REPORT_ROW_MS: '400' });
});
afterAll(async () => {
  await remote?.close();
});

if (!python) test.skip(`the tasks extension: skipped, ${pythonMissing}`, () => undefined);

function reports(log: string, env: Record<string, string> = {}) {
  return { command: python!, args: [pythonExample('reports')], env: { OZ0_RECEIVED_LOG: log, ...env } };
}

/** The server's log of one task: its making, the rows its work wrote, its polls, its end. */
function taskLog(log: string, taskId: string) {
  const all = readReceived(log);
  return {
    all,
    made: all.filter((r) => r.event === 'task' && r.taskId === taskId),
    polls: all.filter((r) => r.event === 'tasks/get' && r.taskId === taskId),
    rows: all.filter((r) => r.event === 'row'),
    ended: all.filter((r) => typeof r.event === 'string' && r.event.startsWith('task ') && r.taskId === taskId),
  };
}

/** A plugin config of the reports server, logging to a fresh file, its rows `rowMs` apart. */
function reportsPlugin(rowMs: number, tools: Record<string, unknown> = {}) {
  const log = path.join(tmpDir(), 'reports.jsonl');
  const servers = { rep: reports(log, { REPORT_ROW_MS: String(rowMs) }) };
  return { log, config: temporal.config({ servers, tools }) };
}

/** Waits for the server to say the task ended cancelled; the tasks/cancel it received came first. */
async function cancelledOnServer(log: string, taskId: string) {
  const ended = await eventually(
    () => taskLog(log, taskId).ended.find((r) => r.event === 'task cancelled'),
    10_000,
    'the task cancelled',
  );
  const seen = taskLog(log, taskId);
  const cancel = seen.all.find((r) => r.event === 'tasks/cancel' && r.taskId === taskId)!;
  expect(cancel.t as number).toBeLessThanOrEqual(ended.t as number);
  return { seen, cancel };
}

function taskIdOf(note: string | undefined): string {
  const id = /task ([0-9a-f]{32})/.exec(note ?? '')?.[1];
  if (!id) throw new Error(`no task in the note ${JSON.stringify(note)}`);
  return id;
}

withPython.each([
  ['stdio (a plugin server)', 'stdio'],
  ['Streamable HTTP (a remote server)', 'http'],
])(
  'SEP-2663 over %s: the call declares the extension and is answered with a task, whose work runs after that answer; polled with tasks/get, its id in the heartbeat; the trace says `task <id>`',
  async (_kind, transport) => {
    const name = uniqueId('report');
    const log = transport === 'http' ? remoteLog : path.join(tmpDir(), 'reports.jsonl');
    const servers = { rep: transport === 'http' ? { url: remote!.url } : reports(log, { REPORT_ROW_MS: '300' }) };
    const config = temporal.config({ servers });
    const node = await createNode({ config, logger });
    const tenant = uniqueId('t');
    await node.runUntil(async () => {
      if (transport === 'http') await approve(temporal, config, tenant, 'rep');
      const handle = await temporal.client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId('task'),
        args: [{ tenant, steps: [{ call: 'rep.export_orders', args: { rows: 4, name } }] }],
      });
      const made = await eventually(() => readReceived(log).find((r) => r.event === 'task'), 30_000, 'the task');
      // The task's id reaches Temporal in the attempt's heartbeat while it runs: what a later attempt reads.
      const beat = await eventually(
        async () => {
          const call = (await handle.describe()).raw.pendingActivities?.find((a) => a.activityId === 'c1');
          const state = await heartbeatOf<CallProgressState>(handle, call?.heartbeatDetails?.payloads?.[0]);
          return state?.task?.id === made.taskId ? state : undefined;
        },
        15_000,
        'the task in the heartbeat',
      );
      expect(beat.task).toEqual({ id: made.taskId, status: 'working', protocol: '2026-07-28' });
      const step = callsOf(await handle.result())[0];
      const taskId = taskIdOf(step.attempts[0].note);
      expect(taskId).toBe(made.taskId);
      expect(step.protocol).toBe('2026-07-28');
      expect(step.attempts).toEqual([{ attempt: 1, outcome: 'ok', note: `task ${taskId}` }]);
      expect(step.result).toMatchObject({ isError: false, structuredContent: { name, rows: 4 } });
      // On the server's side: one task, made for this call's key; no ordinary call; its rows written after the task
      // was answered; polled until it ended.
      const seen = taskLog(log, taskId);
      expect(seen.made).toHaveLength(1);
      expect(seen.made[0].key).toBe(`${handle.workflowId}/c1`);
      expect(seen.all.filter((r) => r.event === 'call' && r.key === `${handle.workflowId}/c1`)).toEqual([]);
      const rows = seen.rows.filter((r) => r.name === name);
      expect(rows.map((r) => r.row)).toEqual([1, 2, 3, 4]);
      expect(rows[0].t as number).toBeGreaterThanOrEqual(seen.made[0].t as number);
      expect(seen.polls.length).toBeGreaterThanOrEqual(2);
      expect(seen.ended.map((r) => r.event)).toEqual(['task completed']);
    });
  },
);

withPython(
  'SEP-2663, C6/P5: past its time limit, the next attempt polls the same task instead of calling again: a write made once, whatever its hints',
  async () => {
    const name = uniqueId('report');
    // Eight rows of 0.5 s; the first attempt stops at 2.7 s.
    const { log, config } = reportsPlugin(500, { 'rep.export_orders': { timeoutSeconds: 3, maxAttempts: 3 } });
    const { trace } = await runJob(temporal, config, {
      tenant: 'acme',
      steps: [
        // A one-row export first starts the job's Python server: its start (seconds on a loaded machine) is not
        // what the second call's time limit is about.
        { call: 'rep.export_orders', args: { rows: 1, name: `${name}-warm` } },
        { call: 'rep.export_orders', args: { rows: 8, name } },
      ],
    });
    const step = callsOf(trace)[1];
    const taskId = taskIdOf(step.attempts[0].note);
    expect(step.attempts.map((a) => [a.outcome, a.note])).toEqual([
      ['timeout', `task ${taskId}; oz0: time limit: 3 s less its margin`],
      ['ok', `resumed task ${taskId}`],
    ]);
    const seen = taskLog(log, taskId);
    expect(seen.made).toHaveLength(1);
    expect(seen.rows.filter((r) => r.name === name).map((r) => r.row)).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    expect(seen.all.some((r) => r.event === 'tasks/cancel')).toBe(false);
  },
);

withPython(
  'SEP-2663, T4: a node lost while its call’s task runs: the next attempt, on another node, polls the same task with tasks/get, with no session on either node; the export is written once',
  async () => {
    const name = uniqueId('report');
    // Twenty rows of 0.4 s: the task is still working when node a dies, and when node b picks it up.
    const call = { call: 'rep.export_orders', args: { rows: 20, name } };
    const { file, a, handle } = await startOnNodeA(temporal, { server: 'rep', url: remote!.url }, call);
    const key = `${handle.workflowId}/c1`;
    const made = await eventually(
      () => readReceived(remoteLog).find((r) => r.event === 'task' && r.key === key),
      30_000,
      'the task',
    );
    // Once the task id has reached Temporal, the node dies as a lost one does.
    await heartbeatMentions(handle, made.taskId as string);
    a.proc.kill('SIGKILL');
    await temporal.startWorker(file, 'node-b');
    const step = callsOf(await handle.result())[0];
    expect(step.node).toBe('node-b');
    expect(step.protocol).toBe('2026-07-28');
    expect(step.result).toMatchObject({ isError: false, structuredContent: { name, rows: 20 } });
    expect(step.attempts.map((x) => [x.outcome, x.note])).toEqual([
      ['lost', expect.stringContaining('without a word')],
      ['ok', `resumed task ${made.taskId}`],
    ]);
    // On the server's side: one task, the export written once, and every request of both nodes on 2026-07-28
    // without a session (there is none to carry over).
    const seen = taskLog(remoteLog, made.taskId as string);
    expect(seen.made).toHaveLength(1);
    expect(seen.all.filter((r) => r.event === 'call' && r.key === key)).toEqual([]);
    expect(seen.rows.filter((r) => r.name === name).map((r) => r.row)).toEqual(
      Array.from({ length: 20 }, (_, i) => i + 1),
    );
    for (const r of [...seen.made, ...seen.polls]) expect([r.protocol, r.session]).toEqual(['2026-07-28', null]);
  },
);

withPython(
  'SEP-2663, C1/C2: a cancelled job sends tasks/cancel for its running task, and the server stops its work',
  async () => {
    const name = uniqueId('report');
    const { log, config } = reportsPlugin(300);
    const node = await createNode({ config, logger });
    await node.runUntil(async () => {
      const handle = await temporal.client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId('task'),
        args: [{ tenant: 'acme', steps: [{ call: 'rep.export_orders', args: { rows: 50, name } }] }],
      });
      const made = await eventually(() => readReceived(log).find((r) => r.event === 'task'), 30_000, 'the task');
      await eventually(() => readReceived(log).find((r) => r.event === 'row' && r.row === 2), 30_000, 'row 2');
      await handle.cancel();
      await expect(handle.result()).rejects.toThrow();
      const { seen } = await cancelledOnServer(log, made.taskId as string);
      const rows = seen.rows.filter((r) => r.name === name).length;
      await new Promise((r) => setTimeout(r, 1000));
      expect(readReceived(log).filter((r) => r.event === 'row' && r.name === name)).toHaveLength(rows);
      expect(rows).toBeLessThan(50);
    });
  },
);

withPython(
  'SEP-2663, issue 25.5: a task that turns input_required mid-way ends the call with an error result naming what it asked, and is cancelled: no hang, no work past the question',
  async () => {
    const name = uniqueId('import');
    const { log, config } = reportsPlugin(200);
    const { trace } = await runJob(temporal, config, {
      tenant: 'acme',
      steps: [{ call: 'rep.import_orders', args: { batches: 3, name } }],
    });
    const step = callsOf(trace)[0];
    const taskId = taskIdOf(step.attempts[0].note);
    const asked = `elicitation (${JSON.stringify(`Overwrite the orders already in ${name}?`)})`;
    expect(step.attempts).toEqual([
      {
        attempt: 1,
        outcome: 'error',
        note: `task ${taskId}; the server asked for ${asked}: not offered; task ${taskId} cancelled`,
      },
    ]);
    expect(step.result).toMatchObject({
      isError: true,
      content: [
        { type: 'text', text: expect.stringContaining(`the server asked for ${asked}, which oz0 does not offer`) },
      ],
    });
    // On the server's side: the task asked after its first batch, oz0 answered no tasks/update, the tasks/cancel
    // came after the question, and the work ended there: no second batch.
    const { seen, cancel } = await cancelledOnServer(log, taskId);
    const question = seen.all.find((r) => r.event === 'asked' && r.taskId === taskId)!;
    expect(question.t as number).toBeLessThanOrEqual(cancel.t as number);
    expect(seen.all.filter((r) => r.event === 'tasks/update')).toEqual([]);
    expect(seen.all.filter((r) => r.event === 'batch' && r.name === name).map((r) => r.batch)).toEqual([1]);
  },
);

withPython(
  'SEP-2663: on 2025-11-25 the extension is not defined: the same function is an ordinary call, and no task is made',
  async () => {
    const log = path.join(tmpDir(), 'reports.jsonl');
    const config = temporal.config({
      servers: { rep: { ...reports(log, { REPORT_ROW_MS: '10' }), protocol: '2025-11-25' } },
    });
    const { trace, handle } = await runJob(temporal, config, {
      tenant: 'acme',
      steps: [{ call: 'rep.export_orders', args: { rows: 3 } }],
    });
    const step = callsOf(trace)[0];
    expect(step.protocol).toBe('2025-11-25');
    expect(step.attempts).toEqual([{ attempt: 1, outcome: 'ok' }]);
    expect(readReceived(log).filter((r) => r.event === 'task')).toEqual([]);
    expect(readReceived(log).filter((r) => r.event === 'call')).toEqual([
      expect.objectContaining({ key: `${handle.workflowId}/c1`, protocol: '2025-11-25' }),
    ]);
  },
);
