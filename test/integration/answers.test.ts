/**
 * D1-D3: answers of any size, in jobs of any length, on Temporal's External Storage — tried as an agent platform runs
 * them, with a server that answers what browser tools and file readers answer (examples/pages.ts). Asserted on the
 * server's side (the SHA-256 of what it answered, from its own log), on Temporal's (the history as `temporal workflow
 * show` prints it: no answer's bytes inline past the threshold) and on the store's (its own listing, per tenant) —
 * each beside a control: the same answer with the store off is refused by Temporal, or lies in history in the clear.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { connectJobClient, jobTrace, startJob } from '../../client/jobs';
import type { JobClient } from '../../client/jobs';
import { readReceived } from '../../examples/common';
import { contentDigest, startPagesServer } from '../../examples/pages';
import { callsOf } from '../../model/job';
import type { JobTrace, StepTrace } from '../../model/job';
import type { LoadedConfig } from '../../common/config';
import { createNode } from '../../worker/node';
import { sweepFolder } from '../../data';
import { approve, eventually, example, logger, runWhole, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { historyPayloads } from '../helpers/history';

const temporal = useTemporal();
const MiB = 1024 * 1024;

function pagesConfig(extra: Record<string, unknown> = {}) {
  const log = path.join(tmpDir(), 'pages.jsonl');
  const config = temporal.config({
    servers: { pages: { command: 'node', args: [example('pages')], env: { OZ0_RECEIVED_LOG: log } } },
    tools: { '*': { timeoutSeconds: 60, maxAttempts: 2 } },
    ...extra,
  });
  return { config, log };
}

const runSpec = (config: LoadedConfig, spec: object) => runWhole(config, spec, uniqueId('answers'));

/** What the server answered, by key: the SHA-256 of each answer's content as it sent it. */
function answered(log: string): Map<string, string> {
  return new Map(readReceived(log).map((e) => [e.key as string, e.sha256 as string]));
}

const digestOf = (step: StepTrace) => contentDigest(step.result);

test('D1, D2: answers of megabytes in every content type reach the job whole, byte for byte; history holds claims and the store holds them under the tenant', async () => {
  const { config, log } = pagesConfig();
  const tenant = uniqueId('acme');
  const spec = {
    tenant,
    steps: [
      { call: 'pages.read_page', args: { kib: 3 * 1024 } },
      // 800 × 655 pixels: about 1.5 MiB of PNG, 2 MiB of base64.
      { call: 'pages.screenshot', args: { width: 800, height: 655 } },
      { call: 'pages.read_file', args: { kib: 2.5 * 1024, binary: true } },
      { call: 'pages.read_file', args: { kib: 600, binary: false, seed: 2 } },
      { call: 'pages.record_audio', args: { kib: 700 } },
      { call: 'pages.table', args: { rows: 2000, kib: 1200 } },
      { call: 'pages.save_snapshot', args: { kib: 400 } },
      { call: 'pages.read_page', args: { kib: 1 } },
    ],
  };
  const { raw, shown, id, runId } = await runSpec(config, spec);
  const server = answered(log);
  const calls = callsOf(shown);
  expect(calls).toHaveLength(spec.steps.length);
  for (const step of calls) {
    expect(step.result.isError).toBe(false);
    // Byte for byte: the SHA-256 of the content the job reads is the one the server wrote down as it answered.
    expect(digestOf(step)).toBe(server.get(step.key));
  }
  const screenshot = calls[1].result.content[0] as { type: string; mimeType: string; data: string };
  expect(screenshot).toMatchObject({ type: 'image', mimeType: 'image/png' });
  expect(Buffer.from(screenshot.data, 'base64').subarray(1, 4).toString()).toBe('PNG');
  expect(screenshot.data.length).toBeGreaterThan(1.9 * MiB);
  expect(calls[5].result.structuredContent).toMatchObject({ rows: expect.any(Array) });

  // D3: the job's own result holds claims, not copies: small, whatever its answers weigh.
  const rawCalls = callsOf(raw);
  for (const step of rawCalls.slice(0, 7)) {
    expect(step.result).toMatchObject({ content: [], stored: { driver: 'oz0.folder', claim: { owner: tenant } } });
  }
  expect(rawCalls[7].result.stored).toBeUndefined();
  expect(rawCalls[7].result.content).toHaveLength(1);
  expect(Buffer.byteLength(JSON.stringify(raw))).toBeLessThan(64 * 1024);

  // Temporal's side: no payload of the history past the threshold, and none of the answers' bytes in it.
  const payloads = historyPayloads(temporal.server, id, runId);
  expect(payloads.length).toBeGreaterThan(10);
  expect(Math.max(...payloads.map((p) => p.bytes))).toBeLessThan(256 * 1024);
  const text = (calls[0].result.content[0] as { text: string }).text;
  const canary = text.slice(100_000, 100_064);
  expect(payloads.some((p) => p.text.includes(canary))).toBe(false);

  // The store's side: every answer under the tenant's prefix, filed under its job.
  const objects = path.resolve(config.baseDir, config.node.stateDir, 'payloads', 'objects', tenant);
  const files = fs.readdirSync(objects, { recursive: true, withFileTypes: true }).filter((f) => f.isFile());
  expect(files.length).toBeGreaterThanOrEqual(7);
  expect(files.every((f) => f.parentPath.includes(`/wi/${encodeURIComponent(id)}/`))).toBe(true);
  for (const f of files) expect(fs.statSync(path.join(f.parentPath, f.name)).mode & 0o077).toBe(0);
}, 180_000);

test('D2 (the control): the same answers with the store off — one of 3 MiB is refused by Temporal, one of 1.2 MiB lies in history in the clear (sealing off too, to read it there)', async () => {
  const { config } = pagesConfig({ payloads: { store: 'off', seal: 'off' } });
  const { shown, id, runId } = await runSpec(config, {
    tenant: uniqueId('acme'),
    steps: [
      { call: 'pages.screenshot', args: { width: 700, height: 600 } },
      { call: 'pages.read_page', args: { kib: 3 * 1024 } },
    ],
  });
  const [screenshot, page] = callsOf(shown);
  expect(screenshot.result.isError).toBe(false);
  const data = (screenshot.result.content[0] as { data: string }).data;
  const payloads = historyPayloads(temporal.server, id, runId);
  expect(payloads.some((p) => p.text.includes(data.slice(500_000, 500_064)))).toBe(true);
  // Temporal takes no payload past 2 MiB: the answer cannot reach the job, and its error result says why.
  expect(page.result.isError).toBe(true);
  expect((page.result.content[0] as { text: string }).text).toMatch(
    /answered 3\.0 MiB, past the 1\.9 MiB Temporal takes in history with no payload store \(payloads\.store is "off"\)/,
  );
}, 180_000);

test('D1: an answer past node.maxResultMiB is an error result naming its size and the bound; the server did its work, its session goes on, the node too', async () => {
  const { config, log } = pagesConfig({ node: { maxResultMiB: 1 } });
  const { shown } = await runSpec(config, {
    tenant: uniqueId('acme'),
    steps: [
      { call: 'pages.read_page', args: { kib: 3 * 1024 } },
      { call: 'pages.save_snapshot', args: { kib: 3 * 1024 } },
      { call: 'pages.read_page', args: { kib: 900 } },
    ],
  });
  const [big, snapshot, fits] = callsOf(shown);
  const text = (s: StepTrace) => (s.result.content[0] as { text: string }).text;
  expect(big.result.isError).toBe(true);
  expect(text(big)).toMatch(/answered 3\.0 MiB, past oz0's bound of 1\.0 MiB on an answer \(node\.maxResultMiB\)/);
  // The same call would answer the same: one attempt, no retry.
  expect(big.attempts).toEqual([
    { attempt: 1, outcome: 'failed', note: expect.stringMatching(/^the answer was 3\.0 MiB/) },
  ]);
  expect(snapshot.attempts[0].note).toMatch(/^the server did its work and answered 3\.0 MiB.*not made again/);
  expect(text(snapshot)).toMatch(/did its work.*what it did stands/);
  // The server answered each once, in one process (its session went on), and then a call that fits the bound.
  const received = readReceived(log);
  expect(received.map((e) => e.tool)).toEqual(['read_page', 'save_snapshot', 'read_page']);
  expect(new Set(received.map((e) => e.pid)).size).toBe(1);
  expect(fits.result.isError).toBe(false);
  expect(digestOf(fits)).toBe(answered(log).get(fits.key));
}, 180_000);

test('D1 over Streamable HTTP: a remote server’s answers of megabytes reach the job whole, within the bound; one past it is an error result, its session going on', async () => {
  const log = path.join(tmpDir(), 'web.jsonl');
  // The server runs in this process: it writes down what it answered as long as this names its log.
  process.env.OZ0_RECEIVED_LOG = log;
  const web = await startPagesServer();
  try {
    const config = temporal.config({
      servers: { web: { url: web.url } },
      tools: { '*': { timeoutSeconds: 60, maxAttempts: 2 } },
      node: { maxResultMiB: 4 },
    });
    const tenant = uniqueId('acme');
    const steps = [
      { call: 'web.read_page', args: { kib: 3 * 1024 } },
      { call: 'web.screenshot', args: { width: 800, height: 655 } },
      { call: 'web.read_page', args: { kib: 5 * 1024, seed: 3 } },
      { call: 'web.read_page', args: { kib: 10, seed: 4 } },
    ];
    const jc = await connectJobClient(config);
    const node = await createNode({ config, logger });
    const calls = await node
      .runUntil(async () => {
        await approve(temporal, config, tenant, 'web');
        const handle = await startJob(jc, { tenant, steps });
        await handle.result();
        return callsOf(await jobTrace(jc.client, handle.workflowId, { data: jc.data, whole: true }));
      })
      .finally(() => jc.close());
    const server = answered(log);
    for (const i of [0, 1, 3]) expect(digestOf(calls[i])).toBe(server.get(calls[i].key));
    expect((calls[2].result.content[0] as { text: string }).text).toMatch(
      /answered 5\.\d MiB, past oz0's bound of 4\.0 MiB/,
    );
    expect(calls[2].attempts).toHaveLength(1);
  } finally {
    delete process.env.OZ0_RECEIVED_LOG;
    await web.close();
  }
}, 180_000);

test.each([
  ['80 calls of 30 KiB', 80, 30, 1000],
  ['160 calls of 320 KiB, continuing as new every 50', 160, 320, 50],
])(
  'D3: a job of %s completes, every call made once, and its trace shows every run’s steps',
  async (_, n, kib, every) => {
    const { config, log } = pagesConfig({ jobs: { continueAsNewAfterCalls: every } });
    const steps = Array.from({ length: n }, (_, i) => ({ call: 'pages.read_page', args: { kib, seed: i } }));
    const { shown, raw } = await runSpec(config, { tenant: uniqueId('acme'), steps });
    expect(shown.status).toBe('COMPLETED');
    // Every call once, on the server's side.
    const received = readReceived(log);
    expect(received).toHaveLength(n);
    expect(new Set(received.map((e) => e.key)).size).toBe(n);
    // Every run's steps, in order, whole.
    const calls = callsOf(shown);
    expect(calls.map((c) => c.n)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
    expect(shown.omitted).toBe(0);
    const server = answered(log);
    for (const c of calls) expect(digestOf(c)).toBe(server.get(c.key));
    expect(raw.run).toBe(Math.ceil(n / every) - 1);
  },
  300_000,
);

test('D1: a live session’s agent gets an answer of 3 MiB whole, through the node’s gateway', async () => {
  const { config, log } = pagesConfig();
  const jc: JobClient = await connectJobClient(config);
  const node = await createNode({ config, logger });
  try {
    await node.runUntil(async () => {
      const started = await startJob(jc, { tenant: uniqueId('acme'), steps: [{ session: { external: true } }] });
      const agent = new Client({ name: 'agent', version: '1.0.0' });
      const headers = { authorization: `Bearer ${started.sessionTokens[0].token}` };
      await agent.connect(new StreamableHTTPClientTransport(new URL(node.gateway.url), { requestInit: { headers } }));
      const got = await agent.callTool({ name: 'pages.read_page', arguments: { kib: 3 * 1024, seed: 7 } });
      const shot = await agent.callTool({ name: 'pages.screenshot', arguments: { width: 640, height: 480 } });
      await agent.callTool({ name: 'oz0_close_session', arguments: { result: 'done' } }).catch(() => undefined);
      await agent.close();
      const server = readReceived(log);
      expect(contentDigest(got)).toBe(server[0].sha256);
      expect(contentDigest(shot)).toBe(server[1].sha256);
      expect(((got.content as Array<{ text: string }>)[0].text.length / MiB).toFixed(1)).toBe('3.0');
      await started.result();
    });
  } finally {
    await jc.close();
  }
}, 180_000);

test('D2, D6: a client without the job’s store reads its trace, and says which store its answers lie in', async () => {
  const { config } = pagesConfig();
  const { id } = await runSpec(config, {
    tenant: uniqueId('acme'),
    steps: [{ call: 'pages.read_page', args: { kib: 64 } }],
  });
  const elsewhere = await connectJobClient({ ...config, payloads: { ...config.payloads, store: 'off' } });
  try {
    const trace = await jobTrace(elsewhere.client, id, { data: elsewhere.data, whole: true });
    const [step] = callsOf(trace);
    expect(step.result).toMatchObject({
      stored: { driver: 'oz0.folder' },
      unreadable: expect.stringMatching(/lies in the store oz0\.folder, and this process has no store/),
    });
  } finally {
    await elsewhere.close();
  }
}, 120_000);

test('D6: a job started on a node with no store finishes on a node with one: its old answers inline, its new ones stored', async () => {
  const { config, log } = pagesConfig();
  const storeless = { ...config, payloads: { ...config.payloads, store: 'off' as const } };
  const jc = await connectJobClient(storeless);
  const id = uniqueId('before');
  const tenant = uniqueId('acme');
  const steps = [
    { call: 'pages.read_page', args: { kib: 64 } },
    ...Array.from({ length: 3 }, (_, i) => ({ call: 'pages.read_page', args: { kib: 1024, seed: i + 10 } })),
  ];
  try {
    const before = await createNode({ config: storeless, logger });
    await before.runUntil(async () => {
      await startJob(jc, { tenant, steps }, { workflowId: id });
      // The first call is made on the old node, then it goes.
      await eventually(() => (readReceived(log).length >= 1 ? true : undefined), 30_000, 'the first call');
    });
    const { raw, shown } = await (async () => {
      const after = await connectJobClient(config);
      const node = await createNode({ config, logger });
      try {
        return await node.runUntil(async () => {
          const handle = after.client.workflow.getHandle(id);
          const r: JobTrace = await handle.result();
          return { raw: r, shown: await jobTrace(after.client, id, { data: after.data, whole: true }) };
        });
      } finally {
        await after.close();
      }
    })();
    const rawCalls = callsOf(raw);
    expect(rawCalls[0].result.stored).toBeUndefined();
    expect(rawCalls[0].result.content).toHaveLength(1);
    expect(rawCalls.slice(-2).every((c) => c.result.stored?.driver === 'oz0.folder')).toBe(true);
    const server = answered(log);
    for (const c of callsOf(shown)) expect(digestOf(c)).toBe(server.get(c.key));
    expect(readReceived(log)).toHaveLength(4);
  } finally {
    await jc.close();
  }
}, 180_000);

test('D2: a folder store’s objects go with their job’s history: a job Temporal no longer has is swept, one it has is kept', async () => {
  const { config } = pagesConfig();
  const tenant = uniqueId('acme');
  const { id } = await runSpec(config, { tenant, steps: [{ call: 'pages.read_page', args: { kib: 64 } }] });
  const objects = path.resolve(config.baseDir, config.node.stateDir, 'payloads', 'objects');
  const jobs = path.join(objects, tenant, 'v0', 'ns', encodeURIComponent(temporal.server.namespace), 'wt', 'job', 'wi');
  const kept = path.join(jobs, encodeURIComponent(id));
  expect(fs.existsSync(kept)).toBe(true);
  // A job whose history retention removed: its folder, written long ago, under the same tenant.
  const goneId = uniqueId('gone');
  const gone = path.join(jobs, encodeURIComponent(goneId));
  fs.cpSync(kept, gone, { recursive: true });
  const jc2 = await connectJobClient(config);
  try {
    const later = Date.now() + 2 * 60 * 60_000;
    expect(await sweepFolder(objects, jc2.client, later)).toEqual({ jobs: 1, files: 1 });
    expect(fs.existsSync(gone)).toBe(false);
    expect(fs.existsSync(kept)).toBe(true);
    // Written just now: never swept, whatever Temporal says.
    fs.cpSync(kept, gone, { recursive: true });
    expect(await sweepFolder(objects, jc2.client)).toEqual({ jobs: 0, files: 0 });
  } finally {
    await jc2.close();
  }
}, 120_000);
