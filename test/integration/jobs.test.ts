/**
 * The job workflow against a real dev server: spec validation at both edges, error results that do not
 * stop a job, status and trace queries, search attributes and activity summaries in Temporal (T3), retry
 * policy from the function's listing, and a plain cancel that reaches the server.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { WorkflowFailedError, WorkflowNotFoundError } from '@temporalio/client';
import type { WorkflowExecutionInfo } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { jobStatus, jobTrace, startJob, statusFilter } from '../../client/jobs';
import { Oz0Status, callsOf } from '../../model/job';
import { statusQuery, traceQuery } from '../../model/messages';
import { JobSpecError } from '../../model/schemas';
import { createNode } from '../../worker/node';
import { findTemporalCli } from '../../worker/temporal-cli';
import { loadConfig } from '../../common/config';
import { openedWith } from '../../data';
import { logFileOf } from '../logs';
import {
  ROOT,
  attributesOf,
  eventually,
  fixture,
  logger,
  runJob,
  testKeys,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import type { JobSpec } from '../../model/schemas';

const temporal = useTemporal();

const run = promisify(execFile);

/** The SDK's own query behind the UI's "Current Details" and its list of queries and Updates. */
const METADATA_QUERY = '__temporal_workflow_metadata';
interface WorkflowMetadata {
  definition: {
    queryDefinitions: { name: string; description?: string }[];
    updateDefinitions: { name: string; description?: string }[];
  };
  currentDetails?: string;
}

/** The executions a list filter finds now (visibility trails the workflow a little: poll with eventually). */
async function listed(query: string): Promise<WorkflowExecutionInfo[]> {
  const found: WorkflowExecutionInfo[] = [];
  for await (const e of temporal.client.workflow.list({ query })) found.push(e);
  return found;
}

function probeConfig(tools: Record<string, unknown> = {}) {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
    tools: { '*': { timeoutSeconds: 30, maxAttempts: 3 }, ...tools },
  });
  return { config, log };
}

test('a bad spec is refused by the client before any workflow starts, naming the field', async () => {
  const { config } = probeConfig();
  const workflowId = uniqueId('bad');
  const bad = { tenant: 'acme', steps: [{ call: 'no-dot-here' }] };
  const err = await startJob({ client: temporal.client, taskQueue: config.temporal.taskQueue }, bad, {
    workflowId,
  }).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(JobSpecError);
  expect((err as Error).message).toContain('steps[0].call');
  await expect(temporal.client.workflow.getHandle(workflowId).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
});

test('T3: a bad spec started raw fails the workflow with a clear non-retryable error, its tenant and FAILED on the run', async () => {
  const { config } = probeConfig();
  const tenant = uniqueId('tenant');
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('raw-bad'),
      args: [{ tenant, steps: [{ call: 'probe.probe' }, { session: [] }] }],
    });
    const err = await handle.result().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkflowFailedError);
    const cause = (err as WorkflowFailedError).cause as { type?: string; nonRetryable?: boolean; message: string };
    expect(cause.type).toBe('Oz0BadSpec');
    expect(cause.nonRetryable).toBe(true);
    expect(cause.message).toContain('steps[1].session');
    const described = await handle.describe();
    expect(described.status.name).toBe('FAILED');
    // What could be known is on the failed run: a tenant's filter finds its own failed jobs.
    expect(attributesOf(described)).toEqual({ Oz0Status: 'FAILED', Oz0Tenant: tenant, Oz0Tools: ['probe.probe'] });
    const found = await listed(`Oz0Tenant = "${tenant}" AND ${statusFilter('FAILED')}`);
    expect(found.map((e) => e.workflowId)).toEqual([handle.workflowId]);
  });
});

test('T3: a bad spec whose tenant is no tenant name still says FAILED, and names no tenant', async () => {
  const { config } = probeConfig();
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('raw-bad'),
      args: [{ tenant: 'not a tenant!', steps: 'none' }],
    });
    await expect(handle.result()).rejects.toBeInstanceOf(WorkflowFailedError);
    expect(attributesOf(await handle.describe())).toEqual({ Oz0Status: 'FAILED' });
  });
});

test('T2/T3: a run that continued as new says CONTINUED_AS_NEW; only the current run is running, from its start', async () => {
  const { config, log } = probeConfig();
  const tenant = uniqueId('tenant');
  const workflowId = uniqueId('can');
  const node = await createNode({
    config: { ...config, jobs: { ...config.jobs, continueAsNewAfterCalls: 1 } },
    logger,
  });
  await node.runUntil(async () => {
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId,
      args: [{ tenant, steps: [{ call: 'probe.probe' }, { call: 'probe.probe' }, { call: 'probe.hang' }] }],
    });
    await eventually(() => readReceived(log).find((r) => r.event === 'start'), 30_000, 'the third run to call');
    const runs = await eventually(async () => {
      const all = await listed(`WorkflowId = "${workflowId}"`);
      return all.length === 3 && all.every((e) => e.typedSearchAttributes.get(Oz0Status) !== undefined)
        ? all
        : undefined;
    }, 20_000);
    const byStatus = runs.map((e) => [e.status.name, attributesOf(e).Oz0Status]).sort();
    expect(byStatus).toEqual([
      ['CONTINUED_AS_NEW', 'CONTINUED_AS_NEW'],
      ['CONTINUED_AS_NEW', 'CONTINUED_AS_NEW'],
      ['RUNNING', 'running'],
    ]);
    // docs/trace.md's filter lists the job once: its current run.
    const running = await listed(`Oz0Tenant = "${tenant}" AND Oz0Status = "running"`);
    expect(running.map((e) => [e.workflowId, e.runId])).toEqual([[workflowId, (await handle.describe()).runId]]);
    // Every run carries the job's tenant and tools, the current one from its first event on.
    for (const run of runs) expect(attributesOf(run)).toMatchObject({ Oz0Tenant: tenant });
    const history = await temporal.client.workflow.getHandle(workflowId).fetchHistory();
    const started = history.events![0].workflowExecutionStartedEventAttributes!;
    expect(started.continuedExecutionRunId).toBeTruthy();
    expect(Object.keys(started.searchAttributes?.indexedFields ?? {}).sort()).toEqual([
      'Oz0Status',
      'Oz0Tenant',
      'Oz0Tools',
    ]);
    expect(await jobStatus(temporal.client, workflowId)).toBe('running');
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    expect(attributesOf(await temporal.client.workflow.getHandle(workflowId).describe()).Oz0Status).toBe('CANCELED');
  });
});

// The Temporal CLI of the dev servers; without one (a downloaded dev server) there is no CLI to drive.
const cli = findTemporalCli({ install: false });

(cli ? test : test.skip)(
  'T3: a status query in the same breath as `temporal workflow start` finds its handler, every time (the Temporal CLI)',
  async () => {
    const { config } = probeConfig();
    const address = ['--address', temporal.server.address, '--namespace', temporal.server.namespace];
    /** One shell line: the query leaves as soon as the start has answered; it prints the query's answer. */
    const startAndQuery = async (id: string) => {
      const input = JSON.stringify({ tenant: 'acme', steps: [{ call: 'probe.hang', args: { ms: 60_000 } }] });
      const query = [cli!, 'workflow', 'query', ...address, '--workflow-id', id, '--name', 'status', '-o', 'json'];
      const line = [
        [cli!, 'workflow', 'start', ...address, '--task-queue', config.temporal.taskQueue, '--type', 'job'],
        ['--workflow-id', id, '--input', input, '-o', 'json', '>/dev/null'],
        ['&&', ...query],
      ]
        .flat()
        .map((a) => (/^[\w./:@=>&-]+$/.test(a) ? a : `'${a.replace(/'/g, `'\\''`)}'`))
        .join(' ');
      // Temporal answers "Workflow is busy" (RESOURCE_EXHAUSTED) while its own lock on the run is taken a moment too
      // long, as on a loaded machine; its SDK clients try again, the CLI does not: the query alone is sent again then.
      const { stdout } = await run('bash', ['-c', line]).catch(async (err: Error) => {
        for (let i = 0; ; i++) {
          if (!/Workflow is busy/.test(String(err)) || i === 5) throw err;
          await new Promise((r) => setTimeout(r, 500));
          const again = await run(cli!, query.slice(1)).catch((e: Error) => e);
          if (!(again instanceof Error)) return again;
          err = again;
        }
      });
      // The CLI prints the answer sealed (D4: it has no key); oz0's client opens it.
      const { queryResult } = JSON.parse(stdout) as {
        queryResult: { payloads: Array<{ metadata: Record<string, string>; data: string }> };
      };
      const payloads = queryResult.payloads.map((p) => ({
        metadata: Object.fromEntries(Object.entries(p.metadata).map(([k, v]) => [k, Buffer.from(v, 'base64')])),
        data: Buffer.from(p.data, 'base64'),
      }));
      expect(payloads.map((p) => p.metadata.encoding.toString())).toEqual(['binary/oz0-sealed']);
      const converter = temporal.client.options.loadedDataConverter;
      const context = { type: 'workflow' as const, namespace: temporal.server.namespace, workflowId: id };
      const opened = await openedWith(converter, payloads, context);
      return { queryResult: opened.map((p) => converter.payloadConverter.fromPayload(p)) };
    };
    // Started before any node polls: Temporal holds each query and hands it over with the job's first workflow
    // task, so it is answered right after the first activation, whatever the job awaits first.
    const early = Array.from({ length: 5 }, () => uniqueId('breath'));
    const answers = early.map(startAndQuery);
    for (const id of early)
      await eventually(() =>
        temporal.client.workflow
          .getHandle(id)
          .describe()
          .catch(() => undefined),
      );
    await new Promise((r) => setTimeout(r, 1000));
    const node = await createNode({ config, logger });
    await node.runUntil(async () => {
      for (const answer of await Promise.all(answers)) expect(answer).toMatchObject({ queryResult: ['running'] });
      // And with the node running, one after another.
      const late = Array.from({ length: 5 }, () => uniqueId('breath'));
      for (const id of late) expect(await startAndQuery(id)).toMatchObject({ queryResult: ['running'] });
      await Promise.all([...early, ...late].map((id) => temporal.client.workflow.getHandle(id).cancel()));
    });
  },
);

test('T1: a job is one workflow execution, its id the job id; each call is one activity (c1, c2, …)', async () => {
  const { config } = probeConfig();
  const workflowId = uniqueId('t1');
  const spec: JobSpec = {
    tenant: 'acme',
    steps: [{ call: 'probe.probe' }, { call: 'probe.probe' }, { call: 'probe.probe' }],
  };
  const { trace, handle } = await runJob(temporal, config, spec, workflowId);
  const described = await handle.describe();
  expect(described.workflowId).toBe(workflowId);
  expect(described.type).toBe('job');
  const executions = [];
  for await (const e of temporal.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) executions.push(e);
  expect(executions).toHaveLength(1);
  const scheduled = ((await handle.fetchHistory()).events ?? [])
    .map((e) => e.activityTaskScheduledEventAttributes)
    .filter((a) => a?.activityType?.name === 'callTool')
    .map((a) => a!.activityId);
  expect(scheduled).toEqual(['c1', 'c2', 'c3']);
  expect(callsOf(trace).map((s) => s.activityId)).toEqual(scheduled);
});

test('T3: an error result is recorded on its step and the job goes on; trace and status queries; summaries and search attributes', async () => {
  const { config } = probeConfig();
  const tenant = uniqueId('tenant');
  const spec: JobSpec = {
    tenant,
    steps: [
      { call: 'probe.probe' },
      { call: 'probe.no_such_function' },
      { call: 'nosuchserver.fn' },
      { call: 'probe.probe' },
    ],
  };
  const { trace, handle } = await runJob(temporal, config, spec);
  expect(trace.status).toBe('COMPLETED');
  expect(callsOf(trace).map((s) => s.result.isError)).toEqual([false, true, true, false]);
  const text = (i: number) => (callsOf(trace)[i].result.content[0] as { text: string }).text;
  expect(text(1)).toContain('server "probe" has no function "no_such_function"');
  expect(text(2)).toContain('no server named "nosuchserver"');
  // The trace of a completed job reads without a worker; queries answer on a closed job while a node runs.
  expect(callsOf(await jobTrace(temporal.client, handle.workflowId))).toHaveLength(4);
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    expect(await handle.query(statusQuery)).toBe('COMPLETED');
    expect(callsOf(await handle.query(traceQuery))).toEqual(callsOf(trace));
  });
  // Each activity's summary names its tool and its key, without the job id (the page is the job's own).
  const history = await handle.fetchHistory();
  const sealed = (history.events ?? [])
    .filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'callTool')
    .map((e) => e.userMetadata!.summary!);
  // Sealed as every payload of the job is (D4), opened as the UI's codec server would for the tenant's people.
  const summaries = (
    await openedWith(temporal.client.options.loadedDataConverter, sealed, {
      type: 'workflow',
      namespace: temporal.server.namespace,
      workflowId: handle.workflowId,
    })
  ).map((p) => JSON.parse(Buffer.from(p.data!).toString()) as string);
  expect(summaries[0]).toBe('probe.probe · …/c1');
  expect(summaries).toHaveLength(4);
  // Search attributes, registered by oz0 itself, are searchable.
  const found = await eventually(
    async () => {
      const list = [];
      for await (const wf of temporal.client.workflow.list({
        query: `Oz0Tenant = "${tenant}" AND ${statusFilter('COMPLETED')}`,
      })) {
        list.push(wf);
      }
      return list.length ? list : undefined;
    },
    20_000,
    'search attributes',
  );
  expect(found[0].workflowId).toBe(handle.workflowId);
  expect(found[0].typedSearchAttributes.getAll().find((p) => p.key.name === 'Oz0Tools')?.value).toEqual([
    'probe.probe',
    'probe.no_such_function',
    'nosuchserver.fn',
  ]);
});

test('T3: a job started by the client has a summary and details; its current details name the running call and its key', async () => {
  const { config, log } = probeConfig();
  const tenant = uniqueId('tenant');
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const spec = { tenant, steps: [{ call: 'probe.probe' }, { call: 'probe.hang', args: { ms: 60_000 } }] };
    const handle = await startJob({ client: temporal.client, taskQueue: config.temporal.taskQueue }, spec);
    const described = await handle.describe();
    expect(await described.staticSummary()).toBe(`${tenant} · 2 steps · probe.probe, probe.hang`);
    expect(await described.staticDetails()).toContain('2. call `probe.hang`');
    await eventually(() => readReceived(log).find((r) => r.event === 'start'), 20_000, 'the hang to start');
    const metadata = await eventually(async () => {
      const m = await handle.query<WorkflowMetadata>(METADATA_QUERY);
      return m.currentDetails?.includes('probe.hang') ? m : undefined;
    });
    expect(metadata.currentDetails).toContain(`\`probe.hang\` · activity \`c2\` · key \`${handle.workflowId}/c2\``);
    expect(metadata.currentDetails).toMatch(/^\*\*running\*\* · run 0, step 2 of 2 · 2 calls made so far/);
    // Every query and Update says what it is for (the UI lists them with their descriptions).
    const handlers = [...metadata.definition.queryDefinitions, ...metadata.definition.updateDefinitions];
    const ours = handlers.filter((h) => !h.name.startsWith('__'));
    expect(ours.map((h) => h.name).sort()).toEqual(
      [
        'answerCall',
        'callTool',
        'cancelCall',
        'closeSession',
        'externalSession',
        'openSession',
        'sessionCall',
        'status',
        'trace',
        'waitingCalls',
      ].sort(),
    );
    for (const h of ours) expect(h.description).toBeTruthy();
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    const closed = await handle.query<WorkflowMetadata>(METADATA_QUERY);
    expect(closed.currentDetails).toMatch(/^\*\*CANCELED\*\*/);
    expect(closed.currentDetails).not.toContain('Running now');
  });
});

test('T3: a job started raw has no summary, and its current details still say who and what', async () => {
  const { config } = probeConfig();
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('raw'),
      args: [{ tenant: 'acme', steps: [{ call: 'probe.probe' }] }],
    });
    await handle.result();
    expect(await (await handle.describe()).staticSummary()).toBeUndefined();
    const { currentDetails } = await handle.query<WorkflowMetadata>(METADATA_QUERY);
    expect(currentDetails!.split('\n')).toEqual([
      '**COMPLETED** · run 0, step 1 of 1 · 1 call made so far',
      '',
      'acme · 1 step · probe.probe',
    ]);
  });
});

test('Config: a copied oz0.config.json starts its servers from its own folder; a missing script is named, at start and in the trace', async () => {
  const dir = tmpDir();
  fs.mkdirSync(path.join(dir, 'servers'));
  fs.mkdirSync(path.join(dir, 'bin'));
  // Servers beside the copy: the probe, loaded from the repository with its dependencies.
  fs.writeFileSync(path.join(dir, 'servers', 'probe.js'), `require(${JSON.stringify(fixture('probe-server.js'))});\n`);
  const script = `#!/bin/sh\nexec '${process.execPath}' '${fixture('probe-server.js')}'\n`;
  fs.writeFileSync(path.join(dir, 'bin', 'probe'), script, { mode: 0o755 });
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      temporal: {
        address: temporal.server.address,
        namespace: temporal.server.namespace,
        taskQueue: uniqueId('oz0-test'),
      },
      servers: {
        probe: { command: 'node', args: ['servers/probe.js'] },
        // A relative command, for a server that runs in a sandbox folder of its own; what its script runs is granted.
        box: {
          command: './bin/probe',
          sandbox: { read: [path.dirname(fixture('probe-server.js')), path.join(ROOT, 'node_modules')] },
        },
        // There in the working directory (the repository), not beside the config.
        gone: { command: 'node', args: ['dist/examples/reader.js'] },
      },
      tools: { 'gone.*': { maxAttempts: 1 } },
      node: { stateDir: 'state' },
      // The keys the test's client seals the spec with (D4), as one machine's processes share them.
      payloads: { seal: { folder: testKeys() } },
    }),
  );
  const config = loadConfig({ file, cwd: ROOT });
  const { trace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'probe.probe' }, { call: 'box.probe' }, { call: 'gone.echo' }],
  });
  const [probe, box, gone] = callsOf(trace);
  expect(probe.result.structuredContent).toMatchObject({ cwd: dir });
  expect(box.result.isError).toBe(false);
  expect((box.result.structuredContent as { cwd: string }).cwd.startsWith(path.join(dir, 'state', 'sandboxes'))).toBe(
    true,
  );
  const missing = `server "gone" cannot start: its script dist/examples/reader.js is not there (looked for ${dir}/dist/examples/reader.js; relative paths in ${file} are resolved against its folder, ${dir})`;
  // S2: one attempt: another would find the script missing again.
  const again = 'not tried again: it would fail the same way until its config or the node changes';
  expect(gone.attempts).toEqual([
    { attempt: 1, outcome: 'failed', note: `the server was not reachable: ${missing}; ${again}` },
  ]);
  // The node said so when it started, before any call.
  const logged = fs.readFileSync(logFileOf(expect.getState().testPath!), 'utf8').split('\n');
  const warned = logged.filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as { level: number; msg: string });
  expect(warned).toContainEqual(expect.objectContaining({ level: 40, msg: missing }));
});

test('retry policy from the listing: a call with no hints gets one attempt; a read-only one gets maxAttempts', async () => {
  const { config, log } = probeConfig({
    'probe.crash_read': { maxAttempts: 3 },
    'probe.crash_write': { maxAttempts: 5 },
  });
  const { trace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'probe.crash_write' }, { call: 'probe.crash_read' }],
  });
  const received = readReceived(log);
  expect(received.filter((r) => r.event === 'crash_write')).toHaveLength(1);
  expect(received.filter((r) => r.event === 'crash_read')).toHaveLength(3);
  expect(callsOf(trace)[0].attempts.map((a) => a.outcome)).toEqual(['failed']);
  expect(callsOf(trace)[1].attempts.map((a) => a.outcome)).toEqual(['failed', 'failed', 'failed']);
  expect(callsOf(trace).every((s) => s.result.isError)).toBe(true);
});

test('C1/C2 (plain cancel): cancelling a job stops its running call, which the running call notifications/cancelled with its request id and a reason', async () => {
  const { config, log } = probeConfig();
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('cancel'),
      args: [{ tenant: 'acme', steps: [{ call: 'probe.hang', args: { ms: 60_000 } }, { call: 'probe.probe' }] }],
    });
    const started = await eventually(() => readReceived(log).find((r) => r.event === 'start'), 20_000, 'call start');
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    const cancelled = readReceived(log).find((r) => r.event === 'cancelled');
    expect(cancelled).toMatchObject({ requestId: started.requestId, reason: 'oz0: job cancelled' });
    expect(await jobStatus(temporal.client, handle.workflowId)).toBe('CANCELED');
    // The job did not go on to its next step.
    expect(readReceived(log).filter((r) => r.event === 'start')).toHaveLength(1);
    const trace = await handle.query(traceQuery);
    expect(callsOf(trace)[0].attempts.at(-1)).toMatchObject({ outcome: 'cancelled', note: 'oz0: job cancelled' });
  });
});
