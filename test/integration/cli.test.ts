/**
 * The CLI as a user runs it (`./bin/oz0`), against a real dev server and a node: job start/status/trace/
 * cancel with the SPEC's output shapes, --help everywhere, bad input refused with the field named.
 */
import { execFile, spawn } from 'node:child_process';
import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { freePort } from '../../worker/dev-server';
import fs from 'node:fs';
import path from 'node:path';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import { ROOT, fixture, logger, sealedWithFileKeys, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { callsOf } from '../../model/job';
import { loadConfig } from '../../common/config';
import { processDataOf } from '../../data';

const temporal = useTemporal();
let node: Oz0Node;
let running: Promise<void>;
let configFile: string;
const dir = tmpDir();

beforeAll(async () => {
  const servers = {
    probe: { command: 'node', args: [fixture('probe-server.js')], env: { PROBE_LOG: path.join(dir, 'p.jsonl') } },
  };
  const config = temporal.config({ servers });
  configFile = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(configFile, JSON.stringify({ temporal: config.temporal, servers }));
  // The node's keys (D4), as one machine's processes share them.
  sealedWithFileKeys(configFile);
  node = await createNode({ config, logger });
  running = node.run();
});
afterAll(async () => {
  await node?.shutdown();
  await running;
});

function oz0(args: string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      path.join(ROOT, 'bin', 'oz0'),
      args,
      { env: { ...process.env, ...env }, timeout: 60_000 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
}

function spec(value: unknown): string {
  const file = path.join(dir, `${uniqueId('spec')}.json`);
  fs.writeFileSync(file, JSON.stringify(value));
  return file;
}

test('job start --wait --json prints the trace JSON; status and trace read it back', async () => {
  const id = uniqueId('cli');
  const file = spec({ tenant: 'acme', steps: [{ call: 'probe.probe' }, { call: 'probe.nope' }] });
  const started = await oz0(['job', 'start', file, '--id', id, '--wait', '--json', '--config', configFile]);
  expect(started.stderr).toBe('');
  expect(started.code).toBe(0);
  const trace = JSON.parse(started.stdout);
  expect(trace).toMatchObject({ jobId: id, status: 'COMPLETED' });
  expect(callsOf(trace)).toHaveLength(2);
  expect(Object.keys(callsOf(trace)[0]).sort()).toEqual([
    'activityId',
    'attempts',
    'key',
    'n',
    'node',
    'protocol',
    'result',
    'session',
    'tool',
  ]);
  expect(callsOf(trace)[0]).toMatchObject({
    tool: 'probe.probe',
    key: `${id}/c1`,
    session: null,
    attempts: [{ attempt: 1, outcome: 'ok' }],
  });
  expect(callsOf(trace)[1].result.isError).toBe(true);

  const status = await oz0(['job', 'status', id], { OZ0_CONFIG: configFile });
  expect(status).toMatchObject({ code: 0, stdout: 'COMPLETED\n' });
  const table = await oz0(['job', 'trace', id, '--config', configFile]);
  expect(table.code).toBe(0);
  expect(table.stdout).toContain(`${id}/c1`);
  expect(table.stdout).toContain('probe.nope');
  const json = await oz0(['job', 'trace', id, '--json', '--config', configFile]);
  expect(JSON.parse(json.stdout).steps).toEqual(callsOf(trace));
  // Issue 32.8: the table's mcp column is in the JSON, as `protocol`.
  const row = table.stdout.split('\n').find((line) => line.includes(`${id}/c1`))!;
  expect(row.split(/\s+/)[4]).toBe(callsOf(trace)[0].protocol);
  expect(callsOf(trace)[0].protocol).toMatch(/^\d{4}-\d{2}-\d{2}$/);
});

test('job start prints the id; job cancel stops it: cancelling, then CANCELED', async () => {
  const file = spec({ tenant: 'acme', steps: [{ call: 'probe.hang', args: { ms: 60_000 } }] });
  const started = await oz0(['job', 'start', file, '--config', configFile]);
  expect(started.code).toBe(0);
  const id = started.stdout.trim();
  expect(id).toMatch(/^job-/);
  const cancel = await oz0(['job', 'cancel', id, '--config', configFile]);
  expect(cancel.code).toBe(0);
  await temporal.client.workflow
    .getHandle(id)
    .result()
    .catch(() => undefined);
  expect((await oz0(['job', 'status', id, '--config', configFile])).stdout).toBe('CANCELED\n');
});

test('a bad spec is refused before any workflow starts: exit 2, the field named', async () => {
  const id = uniqueId('bad');
  const file = spec({ tenant: 'acme', steps: [{ call: 'probe.probe', args: 'not an object' }] });
  const out = await oz0(['job', 'start', file, '--id', id, '--config', configFile]);
  expect(out.code).toBe(2);
  expect(out.stderr).toContain('steps[0].args');
  await expect(temporal.client.workflow.getHandle(id).describe()).rejects.toBeInstanceOf(WorkflowNotFoundError);
});

test('bad config and bad arguments are refused with the field named', async () => {
  const badConfig = path.join(dir, 'bad.json');
  fs.writeFileSync(badConfig, JSON.stringify({ node: { slots: 0 } }));
  const out = await oz0(['job', 'status', 'x', '--config', badConfig]);
  expect(out.code).toBe(2);
  expect(out.stderr).toContain('node.slots');
  const badId = await oz0(['job', 'status', 'has spaces', '--config', configFile]);
  expect(badId.code).toBe(2);
  expect((await oz0(['job', 'status'])).code).toBe(2);
  expect((await oz0(['no-such-command'])).code).toBe(2);
  expect(badId.stderr).toContain('job id');
  const missing = await oz0(['job', 'status', uniqueId('missing'), '--config', configFile]);
  expect(missing.code).toBe(1);
  expect(missing.stderr).toMatch(/^oz0: /);
});

test.each([
  [[]],
  [['dev']],
  [['worker']],
  [['job']],
  [['job', 'start']],
  [['job', 'status']],
  [['job', 'trace']],
  [['job', 'cancel']],
  [['call']],
  [['call', 'list']],
  [['call', 'approve']],
  [['call', 'deny']],
  [['tool', 'kill']],
  [['tool', 'revive']],
  [['policy', 'show']],
  [['policy', 'set']],
  [['policy', 'approve']],
  [['policy', 'revoke']],
])('--help for oz0 %j', async (args) => {
  const out = await oz0([...args, '--help']);
  expect(out.code).toBe(0);
  expect(out.stdout).toContain('Usage: oz0');
});

test('oz0 dev: a dev server with a SQLite file and the Web UI, plus one node; Ctrl-C stops both and exits 0', async () => {
  const devDir = tmpDir();
  const port = await freePort();
  const uiPort = await freePort();
  const devConfig = path.join(devDir, 'oz0.config.json');
  fs.writeFileSync(
    devConfig,
    JSON.stringify({
      temporal: { address: `127.0.0.1:${port}`, taskQueue: uniqueId('dev') },
      servers: { probe: { command: 'node', args: [fixture('probe-server.js')] } },
      node: { stateDir: path.join(devDir, 'state') },
    }),
  );
  const dev = spawn(path.join(ROOT, 'bin', 'oz0'), ['dev', '--config', devConfig, '--ui-port', String(uiPort)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const exited = new Promise<number | null>((resolve) => dev.once('exit', (code) => resolve(code)));
  try {
    let err = '';
    const ui = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`oz0 dev did not come up: ${err}`)), 90_000);
      dev.stderr!.on('data', (chunk: Buffer) => {
        err += chunk.toString();
        const match = /Web UI at (\S+)/.exec(err);
        if (match && err.includes('Ctrl-C')) {
          clearTimeout(timer);
          resolve(match[1]);
        }
      });
    });
    expect(ui).toBe(`http://127.0.0.1:${uiPort}/namespaces/default/workflows`);
    expect((await fetch(ui)).status).toBe(200);
    const connection = await Connection.connect({ address: `127.0.0.1:${port}` });
    try {
      // A plain Temporal client with oz0's data converter, from the same config: the node seals the job's payloads
      // with keys it keeps in its state folder (D4), and this client opens them with the same keys.
      const cfg = loadConfig({ file: devConfig });
      const data = processDataOf(cfg);
      const client = new Client({ connection, dataConverter: data.dataConverter });
      data.useClient(client);
      const handle = await client.workflow.start('job', {
        taskQueue: cfg.temporal.taskQueue,
        workflowId: uniqueId('dev-job'),
        args: [{ tenant: 'acme', steps: [{ call: 'probe.probe' }] }],
      });
      expect(callsOf(await handle.result())[0].result.isError).toBe(false);
    } finally {
      await connection.close();
    }
    expect(fs.existsSync(path.join(devDir, 'state', 'temporal.db'))).toBe(true);
  } finally {
    dev.kill('SIGINT');
  }
  expect(await exited).toBe(0);
});

test('tool kill / revive and policy set / show / approve / revoke from the CLI', async () => {
  const tenant = uniqueId('clit');
  const run = (args: string[], input?: string) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
      const child = execFile(
        path.join(ROOT, 'bin', 'oz0'),
        [...args, '--config', configFile],
        { timeout: 60_000 },
        (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
      );
      child.stdin?.end(input ?? '');
    });
  expect(await run(['tool', 'kill', 'probe.hang', '--tenant', tenant])).toMatchObject({
    code: 0,
    stdout: `probe.hang: killed for tenant ${tenant}\n`,
  });
  expect((await run(['policy', 'set', tenant, 'probe.*', 'ask'])).code).toBe(0);
  const shown = JSON.parse((await run(['policy', 'show', tenant, '--json'])).stdout);
  expect(shown).toMatchObject({ tenant, kills: ['probe.hang'], policy: { 'probe.*': 'ask' } });
  // approve shows the listing and its digest, and asks first: "n" approves nothing.
  const declined = await run(['policy', 'approve', tenant, 'probe'], 'n\n');
  expect(declined.code).toBe(2);
  expect(declined.stdout).toMatch(/probe: \d+ tools, listing digest [0-9a-f]{64}/);
  expect(declined.stdout).toContain('- hang_read: waits until cancelled');
  expect(JSON.parse((await run(['policy', 'show', tenant, '--json'])).stdout).approvals).toEqual({});
  const approved = await run(['policy', 'approve', tenant, 'probe'], 'y\n');
  expect(approved.code).toBe(0);
  const digest = /listing digest ([0-9a-f]{64})/.exec(approved.stdout)![1];
  expect(JSON.parse((await run(['policy', 'show', tenant, '--json'])).stdout).approvals.probe.digest).toBe(digest);
  const table = await run(['policy', 'show', tenant]);
  expect(table.stdout).toContain('probe.hang');
  expect(table.stdout).toContain(digest);
  expect((await run(['policy', 'revoke', tenant, 'probe'])).code).toBe(0);
  expect((await run(['tool', 'revive', 'probe.hang', '--tenant', tenant])).code).toBe(0);
  expect(JSON.parse((await run(['policy', 'show', tenant, '--json'])).stdout)).toMatchObject({
    kills: [],
    approvals: {},
  });
  // Bad input names what is wrong.
  const bad = await run(['policy', 'set', tenant, 'probe.*', 'maybe']);
  expect(bad.code).not.toBe(0);
  expect(bad.stderr).toContain('Invalid option');
});
