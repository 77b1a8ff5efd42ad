/**
 * The three server kinds (SPEC "Words"), seen from the servers' side: a plugin is one shared process per
 * node, a sandbox is the job's own (own folder, own environment, own process group, stopped with its tree
 * when the job ends), a remote server is Streamable HTTP with headers from the environment.
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { readReceived, serveHttp } from '../../examples/common';
import { createReader } from '../../examples/reader';
import { createNode } from '../../worker/node';
import {
  alive,
  approve,
  eventually,
  fixture,
  logger,
  runJob,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import type { JobSpec } from '../../model/schemas';
import type { JobTrace } from '../../model/job';
import { cmdlineOf, hostProcesses, sandboxed } from '../helpers/sandbox';
import { callsOf } from '../../model/job';

const temporal = useTemporal();

interface Probe {
  pid: number;
  instance: string;
  pgid: number;
  cwd: string;
  env: Record<string, string>;
  child?: number;
  childMarker?: string;
}

const probeOf = (step: { result: { structuredContent?: Record<string, unknown> } }) =>
  step.result.structuredContent as unknown as Probe;

test('sandbox: one process per job, in its own folder, own process group, only its configured env; stopped with its tree at job end', async () => {
  const config = temporal.config({
    servers: {
      box: {
        command: 'node',
        args: [path.relative(process.cwd(), fixture('probe-server.js'))],
        sandbox: sandboxed(),
        env: { ONLY: 'this' },
      },
    },
  });
  process.env.OZ0_TEST_SECRET = 'must-not-leak';
  const spec: JobSpec = {
    tenant: 'acme',
    steps: [
      { call: 'box.probe' },
      { call: 'box.spawn_child' },
      { call: 'box.probe' },
      { call: 'box.hang_read', args: { ms: 2000 } },
    ],
  };
  const node = await createNode({ config, logger });
  const { a, b, seen } = await node.runUntil(async () => {
    const run = async () => {
      const handle = await temporal.client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId('sandbox'),
        args: [spec],
      });
      // While its last call waits, the node's view of the job's sandbox: the server and its child.
      const first = await eventually(async () => {
        const calls = callsOf(await handle.query<JobTrace>('trace'));
        return calls.length >= 3 ? calls.map(probeOf) : undefined;
      });
      const server = hostProcesses(`oz0-probe ${first[0].instance}`);
      const child = hostProcesses(first[1].childMarker!);
      const leader = cmdlineOf(server[0]?.pgid ?? 0);
      return { trace: await handle.result(), server, child, leader };
    };
    const [a, b] = await Promise.all([run(), run()]);
    return { a: a.trace, b: b.trace, seen: a };
  });
  const [a1, a2, a3] = callsOf(a).map(probeOf);
  const [b1] = callsOf(b).map(probeOf);
  // One process per job: the same one for all of a job's calls, another for the other job.
  expect(a1.instance).toBe(a3.instance);
  expect(a2.instance).toBe(a1.instance);
  expect(b1.instance).not.toBe(a1.instance);
  // I1: a namespace of its own (its pid there is not the node's view of it), and a process group of its own, led by
  // its sandbox's bwrap, that its child is in too.
  expect(seen.server).toHaveLength(1);
  expect(seen.child).toHaveLength(1);
  const [server] = seen.server;
  expect(a1.pid).not.toBe(server.pid);
  expect(server.pgid).not.toBe(process.pid);
  expect(seen.leader).toMatch(/^\S*bwrap /);
  expect(seen.child[0].pgid).toBe(server.pgid);
  // Its own working directory under the node's state folder, not the node's.
  expect(a1.cwd).not.toBe(process.cwd());
  expect(a1.cwd).toContain(`${path.sep}sandboxes${path.sep}`);
  expect(a1.cwd).not.toBe(b1.cwd);
  // Only the environment its config names (Node adds nothing of the node's own).
  expect(a1.env.ONLY).toBe('this');
  expect(a1.env.OZ0_TEST_SECRET).toBeUndefined();
  expect(a1.env.PATH).toBeUndefined();
  // When the job ended, the server and its child were stopped, and its folder removed.
  await eventually(
    () =>
      hostProcesses(`oz0-probe ${a1.instance}`).length === 0 &&
      hostProcesses(a2.childMarker!).length === 0 &&
      hostProcesses(`oz0-probe ${b1.instance}`).length === 0
        ? true
        : undefined,
    10_000,
    'sandbox stopped',
  );
  expect(fs.existsSync(a1.cwd)).toBe(false);
});

test('plugin: one shared process per node for every job, started again after it dies', async () => {
  const dir = tmpDir();
  const log = path.join(dir, 'received.jsonl');
  const config = temporal.config({
    servers: { shared: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
  });
  const spec: JobSpec = { tenant: 'acme', steps: [{ call: 'shared.probe' }] };
  const node = await createNode({ config, logger });
  const last = await node.runUntil(async () => {
    const start = () =>
      temporal.client.workflow
        .start('job', { taskQueue: config.temporal.taskQueue, workflowId: uniqueId('plugin'), args: [spec] })
        .then((h) => h.result());
    const [a, b] = await Promise.all([start(), start()]);
    const pid = probeOf(callsOf(a)[0]).pid;
    expect(probeOf(callsOf(b)[0]).pid).toBe(pid);
    // The node's working directory, and the node's ordinary environment (plus its own).
    expect(probeOf(callsOf(a)[0]).cwd).toBe(config.baseDir);
    expect(probeOf(callsOf(a)[0]).env.PROBE_LOG).toBe(log);
    process.kill(pid, 'SIGKILL');
    await eventually(() => (!alive(pid) ? true : undefined), 5000, 'plugin dead');
    const c = await start();
    expect(callsOf(c)[0].result.isError).toBe(false);
    expect(probeOf(callsOf(c)[0]).pid).not.toBe(pid);
    // A plugin outlives its jobs...
    expect(alive(probeOf(callsOf(c)[0]).pid)).toBe(true);
    return probeOf(callsOf(c)[0]).pid;
  });
  // ...but not its node.
  await eventually(() => (!alive(last) ? true : undefined), 5000, 'plugin stopped with its node');
});

test('remote: Streamable HTTP with headers from the environment; the server receives the key', async () => {
  const dir = tmpDir();
  const log = path.join(dir, 'received.jsonl');
  process.env.OZ0_RECEIVED_LOG = log;
  process.env.OZ0_TEST_TOKEN = 'Bearer t0ken';
  const seenAuth: string[] = [];
  const mcp = await serveHttp(createReader({ stateFile: path.join(dir, 'seen.json') }), 0);
  // A small proxy in front of the server that records the Authorization header it is sent.
  const proxy = http.createServer((req, res) => {
    seenAuth.push(String(req.headers.authorization));
    const upstream = http.request(mcp.url, { method: req.method, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 500, up.headers);
      up.pipe(res);
    });
    req.pipe(upstream);
  });
  await new Promise<void>((r) => proxy.listen(0, '127.0.0.1', () => r()));
  const port = (proxy.address() as { port: number }).port;
  try {
    const config = temporal.config({
      servers: { search: { url: `http://127.0.0.1:${port}/mcp`, headers: { Authorization: 'env:OZ0_TEST_TOKEN' } } },
    });
    const tenant = uniqueId('remote');
    const spec: JobSpec = { tenant, steps: [{ call: 'search.echo', args: { text: 'over http' } }] };
    // A2: a remote server's calls need its listing approved.
    const { trace, handle } = await runJob(temporal, config, spec, uniqueId('remote'), () =>
      approve(temporal, config, tenant, 'search'),
    );
    expect(callsOf(trace)[0].result.isError).toBe(false);
    const received = readReceived(log).filter((r) => r.tool === 'echo');
    expect(received.map((r) => r.key)).toEqual([`${handle.workflowId}/c1`]);
    expect(seenAuth.length).toBeGreaterThan(0);
    expect(new Set(seenAuth)).toEqual(new Set(['Bearer t0ken']));
  } finally {
    delete process.env.OZ0_RECEIVED_LOG;
    proxy.closeAllConnections();
    await new Promise((r) => proxy.close(r));
    await mcp.close();
  }
});

test('D1: an answer past node.maxResultMiB is an error result after one attempt, even a read that may be made again: the server received one request', async () => {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: log } } },
    tools: { 'probe.huge_read': { maxAttempts: 3 } },
    node: { maxResultMiB: 1 },
  });
  const { trace, handle } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'probe.huge_read', args: { bytes: 2 * 1024 * 1024 } }, { call: 'probe.probe' }],
  });
  const received = readReceived(log).filter((r) => r.event === 'huge');
  expect(received.map((r) => r.key)).toEqual([`${handle.workflowId}/c1`]);
  const [huge, after] = callsOf(trace);
  expect(huge.attempts).toEqual([
    {
      attempt: 1,
      outcome: 'failed',
      note: expect.stringMatching(/^the answer was 2\.0 MiB, past oz0's bound of 1\.0 MiB/),
    },
  ]);
  expect(huge.result.isError).toBe(true);
  // The node and its shared server go on.
  expect(after.result.isError).toBe(false);
});
