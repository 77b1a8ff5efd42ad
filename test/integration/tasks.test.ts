/**
 * MCP tasks (SEP-1686, issue 19.2) against the reference server, @modelcontextprotocol/server-everything as its
 * authors wrote it (test/fixtures/everything.mjs adds only a log of what it receives), over stdio and Streamable
 * HTTP, and against a task server of the tests' own where the reference server cannot show it. Every assertion on
 * what was made is read from the server's side.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import type { LoadedConfig } from '../../common/config';
import { createNode } from '../../worker/node';
import { callsOf } from '../../model/job';
import {
  approve,
  eventually,
  heartbeatMentions,
  fixture,
  logger,
  runJob,
  startOnNodeA,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import { sandboxed, sharedFile } from '../helpers/sandbox';
import { startListening } from '../helpers/listening';
import type { ListeningServer } from '../helpers/listening';
import { logFileOf } from '../logs';
import { pluginTestCli } from '../helpers/cli';

const temporal = useTemporal();
let remote: ListeningServer;
const remoteLog = path.join(tmpDir(), 'everything-http.jsonl');

beforeAll(async () => {
  remote = await startListening('node', [fixture('everything.mjs'), '--http'], { EVERYTHING_LOG: remoteLog });
});
afterAll(async () => {
  await remote?.close();
});

function everything(log: string) {
  return { command: 'node', args: [fixture('everything.mjs')], env: { EVERYTHING_LOG: log } };
}

const research = { call: 'ev.simulate-research-query', args: { topic: 'durable tool calls' } };

/** What the server received for one call: its tools/call, and the tasks requests for the task that call made. */
function receivedFor(log: string, key: string) {
  const all = readReceived(log);
  const calls = all.filter((r) => r.method === 'tools/call' && r.key === key);
  const taskIds = new Set(all.filter((r) => r.method === 'tasks/get').map((r) => r.taskId));
  return { all, calls, taskIds };
}

async function runResearch(config: LoadedConfig, before?: (tenant: string) => Promise<unknown>) {
  const tenant = uniqueId('t');
  return runJob(temporal, config, { tenant, steps: [research] }, uniqueId('task'), async () => before?.(tenant));
}

test.each([
  ['stdio (a plugin server)', 'auto', 'stdio'],
  ['stdio (a plugin server)', '2025-11-25', 'stdio'],
  ['Streamable HTTP (a remote server)', 'auto', 'http'],
  ['Streamable HTTP (a remote server)', '2025-11-25', 'http'],
] as const)(
  'tasks over %s, protocol %s (the reference server speaks 2025-11-25 only): a function that requires a task runs as one: one tools/call with `task`, polled with tasks/get, fetched with tasks/result',
  async (_kind, protocol, transport) => {
    const log = transport === 'http' ? remoteLog : path.join(tmpDir(), 'everything.jsonl');
    const server = transport === 'http' ? { url: remote.url } : everything(log);
    const config = temporal.config({ servers: { ev: { ...server, protocol } } });
    const { trace, handle } = await runResearch(config, (tenant) =>
      transport === 'http' ? approve(temporal, config, tenant, 'ev') : Promise.resolve(),
    );
    const step = callsOf(trace)[0];
    expect(step.protocol).toBe('2025-11-25');
    expect(step.result.isError).toBe(false);
    expect(JSON.stringify(step.result.content)).toContain('Research Report: durable tool calls');
    const taskId = /^task (\S+)$/.exec(step.attempts[0].note ?? '')?.[1];
    expect(step.attempts).toEqual([{ attempt: 1, outcome: 'ok', note: `task ${taskId}` }]);
    const { all, calls } = receivedFor(log, `${handle.workflowId}/c1`);
    expect(calls).toHaveLength(1);
    expect(calls[0].task).toBeDefined();
    expect(all.filter((r) => r.method === 'tasks/get' && r.taskId === taskId).length).toBeGreaterThanOrEqual(2);
    expect(all.filter((r) => r.method === 'tasks/result' && r.taskId === taskId)).toHaveLength(1);
  },
);

test('tasks: past its time limit, the next attempt polls the same task instead of calling again: a write made once whatever its hints (C6, P5)', async () => {
  const log = path.join(tmpDir(), 'everything.jsonl');
  const config = temporal.config({
    servers: { ev: everything(log) },
    // The research takes four 1 s stages; the first attempt stops at 2.7 s.
    tools: { 'ev.simulate-research-query': { timeoutSeconds: 3, maxAttempts: 3 } },
  });
  const { trace, handle } = await runResearch(config);
  const step = callsOf(trace)[0];
  const taskId = /task (\w+)/.exec(step.attempts[0].note ?? '')?.[1];
  // On a loaded machine the second attempt may run out of time too: then a third resumes the same task again.
  const middle = step.attempts.slice(1, -1).map((a) => [a.outcome, a.note]);
  expect(step.attempts.map((a) => [a.outcome, a.note])).toEqual([
    ['timeout', `task ${taskId}; oz0: time limit: 3 s less its margin`],
    ...middle.map(() => ['timeout', `resumed task ${taskId}; oz0: time limit: 3 s less its margin`]),
    ['ok', `resumed task ${taskId}`],
  ]);
  expect(JSON.stringify(step.result.content)).toContain('Research Report');
  // On the server's side: one tools/call in all (simulate-research-query says readOnlyHint: false, idempotentHint:
  // false: it may not be made twice), the task polled across both attempts, and never cancelled.
  const { all, calls } = receivedFor(log, `${handle.workflowId}/c1`);
  expect(calls).toHaveLength(1);
  expect(all.filter((r) => r.method === 'tasks/result' && r.taskId === taskId)).toHaveLength(1);
  expect(all.some((r) => r.method === 'tasks/cancel')).toBe(false);
});

test('tasks: a cancelled job sends tasks/cancel for its running task (C1, C2)', async () => {
  const config = temporal.config({ servers: { ev: { url: remote.url } } });
  const node = await createNode({ config, logger });
  const tenant = uniqueId('t');
  await node.runUntil(async () => {
    await approve(temporal, config, tenant, 'ev');
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('task'),
      args: [{ tenant, steps: [research] }],
    });
    const key = `${handle.workflowId}/c1`;
    const call = await eventually(() => receivedFor(remoteLog, key).calls[0], 30_000, 'the tools/call');
    // Cancelled once the node holds the task: its first tasks/get says it has the task id.
    const polled = await eventually(
      () => readReceived(remoteLog).find((r) => r.method === 'tasks/get' && r.session === call.session),
      30_000,
      'the first tasks/get',
    );
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    const all = readReceived(remoteLog);
    const cancel = all.find((r) => r.method === 'tasks/cancel' && r.taskId === polled.taskId);
    expect(cancel).toBeDefined();
    expect(cancel!.t as number).toBeGreaterThan(call.t as number);
  });
});

test('the reference server pinned to 2026-07-28, which it does not speak: no call is made, and the step says why', async () => {
  const log = path.join(tmpDir(), 'everything.jsonl');
  const config = temporal.config({
    servers: { ev: { ...everything(log), protocol: '2026-07-28' } },
    tools: { '*': { maxAttempts: 1 } },
  });
  const { trace } = await runResearch(config);
  expect(callsOf(trace)[0].attempts).toEqual([
    {
      attempt: 1,
      outcome: 'failed',
      note: expect.stringContaining('did not offer pinned protocol version 2026-07-28'),
    },
  ]);
  expect(readReceived(log).map((r) => r.method)).toEqual(['server/discover']);
});

test('tasks: a function that requires a task, on a server that offers none, is refused before anything is sent', async () => {
  const log = path.join(tmpDir(), 'tasks.jsonl');
  const config = temporal.config({
    servers: { ts: { command: 'node', args: [fixture('task-server.js')], env: { TASK_LOG: log, TASKS: 'off' } } },
  });
  const { trace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'ts.slow_write', args: { id: 'w' } }],
  });
  expect(callsOf(trace)[0].attempts).toEqual([
    {
      attempt: 1,
      outcome: 'failed',
      note: 'nothing was sent: ts.slow_write it must run as an MCP task, and the server does not offer tasks for tools/call',
    },
  ]);
  expect(readReceived(log)).toEqual([]);
});

test('P1 noise: progress that a server goes on sending after its call was stopped is dropped quietly (issue 19.4)', async () => {
  const log = path.join(tmpDir(), 'everything.jsonl');
  const config = temporal.config({
    servers: { ev: everything(log) },
    tools: { 'ev.trigger-long-running-operation': { timeoutSeconds: 2, maxAttempts: 1 } },
  });
  await runJob(temporal, config, {
    tenant: 'acme',
    steps: [
      { call: 'ev.trigger-long-running-operation', args: { duration: 3, steps: 15 } },
      // Runs while the stopped one goes on reporting progress on the shared session.
      { call: 'ev.trigger-long-running-operation', args: { duration: 1, steps: 2 } },
    ],
  });
  const cancelled = readReceived(log).filter((r) => r.method === 'notifications/cancelled');
  expect(cancelled).toHaveLength(1);
  const nodeLog = fs.readFileSync(logFileOf(expect.getState().testPath!), 'utf8');
  expect(nodeLog).not.toMatch(/"level":40[^\n]*server session error/);
});

test('tasks, T4: a node lost while its call’s task runs: the next attempt, on another node, polls the same task; the write is made once', async () => {
  const log = path.join(tmpDir(), 'tasks.jsonl');
  const server = await startListening('node', [fixture('task-server.js'), '--http'], {
    TASK_LOG: log,
    TASK_MS: '8000',
  });
  try {
    const call = { call: 'ts.slow_write', args: { id: 'w-1' } };
    const { file, a, handle } = await startOnNodeA(temporal, { server: 'ts', url: server.url }, call);
    const made = await eventually(() => readReceived(log).find((r) => r.event === 'call'), 30_000, 'the task');
    // Once the task id has reached Temporal and the node has polled the task, it dies as a lost one does.
    await heartbeatMentions(handle, made.taskId as string);
    await eventually(() => readReceived(log).find((r) => r.event === 'tasks/get'), 30_000, "node-a's poll");
    a.proc.kill('SIGKILL');
    await temporal.startWorker(file, 'node-b');
    const step = callsOf(await handle.result())[0];
    expect(step.result).toMatchObject({ isError: false, content: [{ type: 'text', text: 'wrote w-1' }] });
    expect(step.node).toBe('node-b');
    expect(step.attempts.map((x) => [x.outcome, x.note])).toEqual([
      ['lost', expect.stringContaining('without a word')],
      ['ok', `resumed task ${made.taskId}`],
    ]);
    // On the server's side: one call, one write, and the task polled from a second session (the new node's).
    const received = readReceived(log);
    expect(received.filter((r) => r.event === 'call')).toHaveLength(1);
    expect(received.filter((r) => r.event === 'write')).toHaveLength(1);
    const sessions = new Set(received.filter((r) => r.event === 'tasks/get').map((r) => r.session));
    expect(sessions.size).toBe(2);
  } finally {
    await server.close();
  }
});

test('client capabilities: a function the server lists only to clients with sampling is missing, and the step says why; oz0 plugin test names each such function (issue 19.3)', async () => {
  const log = path.join(tmpDir(), 'everything.jsonl');
  const config = temporal.config({ servers: { ev: everything(log) } });
  const { trace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'ev.trigger-sampling-request', args: { prompt: 'hi' } }],
  });
  expect(callsOf(trace)[0].attempts).toEqual([
    {
      attempt: 1,
      outcome: 'failed',
      note: 'server "ev" has no function "trigger-sampling-request": the server lists it only to clients that offer sampling; oz0 does not',
    },
  ]);
  expect(readReceived(log).filter((r) => r.method === 'tools/call')).toEqual([]);
  const configFile = path.join(tmpDir(), 'oz0.config.json');
  fs.writeFileSync(configFile, JSON.stringify({ servers: { ev: everything(log) } }));
  const { report } = await pluginTestCli(configFile, 'ev');
  expect(report.protocol).toBe('2025-11-25');
  expect(report.tasks).toEqual({
    offered: true,
    form: 'SEP-1686',
    functions: [{ function: 'simulate-research-query', support: 'required' }],
  });
  expect(report.hidden).toEqual(
    expect.arrayContaining([
      { function: 'trigger-sampling-request', needs: ['sampling'] },
      { function: 'trigger-elicitation-request', needs: ['elicitation'] },
      { function: 'get-roots-list', needs: ['roots'] },
    ]),
  );
});

test('tasks: a task its server no longer knows is not made again, whatever the next attempt may do (a sandboxed server stopped at its time limit takes its tasks with it, C3)', async () => {
  const { dir, file: log } = sharedFile('tasks.jsonl');
  const config = temporal.config({
    servers: {
      ts: {
        command: 'node',
        args: [fixture('task-server.js')],
        env: { TASK_LOG: log, TASK_MS: '8000' },
        // It loads its sibling fixtures (./serve-http): their folder is granted too.
        sandbox: sandboxed({ read: [path.dirname(fixture('task-server.js'))], write: [dir] }),
      },
    },
    tools: { 'ts.slow_write': { timeoutSeconds: 3, maxAttempts: 3 } },
  });
  const { trace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'ts.slow_write', args: { id: 'w-2' } }],
  });
  const step = callsOf(trace)[0];
  const made = readReceived(log).filter((r) => r.event === 'call');
  expect(made).toHaveLength(1);
  expect(readReceived(log).filter((r) => r.event === 'write')).toHaveLength(0);
  expect(step.attempts.map((a) => [a.outcome, a.note])).toEqual([
    ['timeout', `task ${made[0].taskId}; oz0: time limit: 3 s less its margin`],
    [
      'lost',
      expect.stringMatching(
        new RegExp(`^resumed task ${made[0].taskId}; task ${made[0].taskId}: .*not found.*: not made again$`, 'i'),
      ),
    ],
  ]);
  expect(step.result.isError).toBe(true);
});
