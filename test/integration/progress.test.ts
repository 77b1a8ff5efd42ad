/**
 * Progress that survives attempts and resume for remote servers (P1-P6), asserted on the server's side:
 * the resume `_meta` a later attempt sent, and the units of work the server did (none twice). Also
 * `oz0 job watch` and the heartbeat as the UI shows it.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import type { HttpHandle } from '../../examples/common';
import { startSearchServer } from '../../examples/search';
import type { SearchOptions } from '../../examples/search';
import type { JobTrace } from '../../model/job';
import type { LoadedConfig } from '../../common/config';
import { createNode } from '../../worker/node';
import { ROOT, approve, example, logger, sealedWithFileKeys, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import type { JobSpec } from '../../model/schemas';
import { callsOf } from '../../model/job';

const temporal = useTemporal();
const received = path.join(tmpDir(), 'received.jsonl');
const servers: HttpHandle[] = [];

beforeAll(async () => {
  process.env.OZ0_RECEIVED_LOG = received;
});
afterAll(async () => {
  delete process.env.OZ0_RECEIVED_LOG;
  await Promise.all(servers.map((s) => s.close()));
});

async function searchConfig(opts: SearchOptions, tools: Record<string, unknown> = {}) {
  const server = await startSearchServer(0, opts);
  servers.push(server);
  return temporal.config({
    servers: { search: { url: server.url } },
    tools: { 'search.search': { timeoutSeconds: 3, maxAttempts: 3 }, ...tools },
  });
}

async function run(
  config: LoadedConfig,
  spec: JobSpec,
  approveServer?: string,
): Promise<{ trace: JobTrace; id: string }> {
  const node = await createNode({ config, logger });
  return node.runUntil(async () => {
    if (approveServer) await approve(temporal, config, spec.tenant, approveServer);
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('progress'),
      args: [spec],
    });
    return { trace: await handle.result(), id: handle.workflowId };
  });
}

const requests = (key: string) =>
  readReceived(received).filter((r) => r.tool === 'search' && r.key === key && !r.event);
const work = (key: string) =>
  readReceived(received)
    .filter((r) => r.event === 'work' && r.key === key)
    .map((r) => r.shard);

test('P3/P5: the next attempt carries the last resume token and its progress; the resumed call redoes no finished work', async () => {
  const config = await searchConfig({ stallAt: [2] });
  const tenant = uniqueId('t');
  const { trace, id } = await run(
    config,
    { tenant, steps: [{ call: 'search.search', args: { q: 'x', shards: 4, shard_ms: 50 } }] },
    'search',
  );
  const key = `${id}/c1`;
  const [first, second] = requests(key);
  expect(first.resume).toBeUndefined();
  expect(second.resume).toEqual({ token: 'shard:2', progress: 2 });
  expect(work(key)).toEqual([0, 1, 2, 3]);
  expect(callsOf(trace)[0].result.isError).toBe(false);
  expect(callsOf(trace)[0].attempts).toEqual([
    {
      attempt: 1,
      outcome: 'timeout',
      note: expect.stringContaining('time limit'),
      progress: { progress: 2, total: 4 },
    },
    { attempt: 2, outcome: 'ok', note: 'resumed from progress 2 of 4', progress: { progress: 4, total: 4 } },
  ]);
});

test('P2: an attempt that failed before its server reported anything passes on what the attempt before it left', async () => {
  const config = await searchConfig({ stallAt: [2, 0] });
  const tenant = uniqueId('t');
  const { trace, id } = await run(
    config,
    { tenant, steps: [{ call: 'search.search', args: { q: 'y', shards: 4, shard_ms: 50 } }] },
    'search',
  );
  const key = `${id}/c1`;
  const [, second, third] = requests(key);
  expect(second.resume).toEqual({ token: 'shard:2', progress: 2 });
  // The second attempt reported nothing: the third still resumes from what the first left.
  expect(third.resume).toEqual({ token: 'shard:2', progress: 2 });
  expect(work(key)).toEqual([0, 1, 2, 3]);
  expect(callsOf(trace)[0].attempts.map((a) => [a.outcome, a.note?.split(';')[0]])).toEqual([
    ['timeout', 'oz0: time limit: 3 s less its margin'],
    ['timeout', 'resumed from progress 2 of 4'],
    ['ok', 'resumed from progress 2 of 4'],
  ]);
});

test('P3/P4/P5: an invalid token is ignored and traced; the next attempt carries no resume and says why it started over', async () => {
  const config = await searchConfig({ stallAt: [1], badTokens: true });
  const tenant = uniqueId('t');
  const { trace, id } = await run(
    config,
    { tenant, steps: [{ call: 'search.search', args: { q: 'z', shards: 2, shard_ms: 50 } }] },
    'search',
  );
  const [first, second] = requests(`${id}/c1`);
  expect(first.resume).toBeUndefined();
  expect(second.resume).toBeUndefined();
  expect(callsOf(trace)[0].attempts[0].note).toContain('ignored an invalid resume token');
  expect(callsOf(trace)[0].attempts[1].note).toContain('started over: the token was invalid');
});

test('P6/P4: a plugin server’s progress is kept but no token is taken; its retry starts over and says so', async () => {
  const dir = tmpDir();
  const config = temporal.config({
    servers: {
      reader: {
        command: 'node',
        args: [example('reader')],
        env: { OZ0_RECEIVED_LOG: received, READER_STATE: path.join(dir, 's.json') },
      },
    },
  });
  const { trace, id } = await run(config, {
    tenant: 'acme',
    steps: [{ call: 'reader.read_pages', args: { pages: 3, page_ms: 30, crash_first_attempt: true } }],
  });
  const calls = readReceived(received).filter((r) => r.tool === 'read_pages' && r.key === `${id}/c1` && r.args);
  expect(calls).toHaveLength(2);
  expect(calls.map((c) => c.resume)).toEqual([undefined, undefined]);
  expect(callsOf(trace)[0].attempts[0]).toMatchObject({ outcome: 'failed', progress: { progress: 1, total: 3 } });
  expect(callsOf(trace)[0].attempts[1]).toMatchObject({
    outcome: 'ok',
    note: 'started over: a plugin server’s shared session takes no resume token',
    progress: { progress: 3, total: 3 },
  });
});

test('oz0 job watch --json follows a running call’s progress and attempts until the job ends, its heartbeats opened with the config’s keys', async () => {
  const config = await searchConfig({ stallAt: [2] });
  const tenant = uniqueId('t');
  const configFile = path.join(tmpDir(), 'oz0.config.json');
  fs.writeFileSync(
    configFile,
    JSON.stringify({ temporal: config.temporal, servers: config.servers, tools: config.tools }),
  );
  // The node's keys (D4): the heartbeats the CLI reads are sealed with the job's tenant's key.
  sealedWithFileKeys(configFile);
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    await approve(temporal, config, tenant, 'search');
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('watch'),
      args: [{ tenant, steps: [{ call: 'search.search', args: { q: 'w', shards: 4, shard_ms: 150 } }] }],
    });
    const watched = await new Promise<{ code: number; stdout: string }>((resolve) => {
      execFile(
        path.join(ROOT, 'bin', 'oz0'),
        ['job', 'watch', handle.workflowId, '--json', '--config', configFile],
        { timeout: 60_000 },
        (err, stdout) => resolve({ code: err ? 1 : 0, stdout }),
      );
    });
    expect(watched.code).toBe(0);
    const lines = watched.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    expect(lines.at(-1)).toMatchObject({ status: 'COMPLETED', calls: [] });
    const seen = lines.flatMap((l) => l.calls);
    expect(seen.some((c: { attempt: number }) => c.attempt === 2)).toBe(true);
    expect(seen.some((c: { progress?: number; total?: number }) => c.progress === 2 && c.total === 4)).toBe(true);
    expect(seen.every((c: { tool?: string }) => c.tool === 'search.search')).toBe(true);
  });
});
