/**
 * D4, D6: every tenant's data sealed in Temporal with its own key — asserted on Temporal's side, in the history as
 * `temporal workflow show` prints it (no canary readable there, compressed or not; every payload naming the key that
 * sealed it), and on the store's (its objects sealed too) — each beside a control that shows the test can see the
 * failure: the same job with sealing off lies in history in the clear. A process without a tenant's key reads nothing
 * of that tenant's and says which key it lacks; a node without it fails that tenant's job alone, never itself.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createHash, randomBytes } from 'node:crypto';
import zlib from 'node:zlib';
import { connectJobClient, jobStatus, jobTrace, startJob, stuckOf } from '../../client/jobs';
import { answerCall } from '../../client/calls';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { policyWorkflowId } from '../../model/policy-rules';
import type { LoadedConfig } from '../../common/config';
import { createNode } from '../../worker/node';
import { eventually, example, fixture, logger, runWhole, uniqueId, useTemporal } from '../helpers/temporal';
import { payloadsIn, workflowJson } from '../helpers/history';
import type { HistoryPayload } from '../helpers/history';
import { oz0 } from '../helpers/cli';
import { sandboxed } from '../helpers/sandbox';

const temporal = useTemporal();

const SERVERS = {
  everything: { command: 'node', args: [fixture('everything.mjs')] },
  // A job's own sandboxed server that notes its argument on stderr, then dies: its last words are quoted to the job
  // (a shared server's go to the node's log only, I12), and they are the tenant's data.
  blurt: {
    command: 'node',
    args: [fixture('last-words.js')],
    env: { DIE_AT: 'call', DIE_WORDS: '["bad input: exiting"]' },
    sandbox: sandboxed(),
  },
  pages: { command: 'node', args: [example('pages')] },
};
const TOOLS = { '*': { timeoutSeconds: 60, maxAttempts: 1 } };

/** A canary no payload holds by chance. */
const canary = () => `canary-${randomBytes(12).toString('hex')}`;

/** A key's id as oz0 names it: the first 16 hex digits of its SHA-256. */
const keyOf = (hex: string) => createHash('sha256').update(Buffer.from(hex, 'hex')).digest('hex').slice(0, 16);

/** Whether a payload holds the text: as it is, or inflated (deflate, raw deflate, gzip) as a compressor would hide it. */
function holds(p: HistoryPayload, text: string, raw: Buffer): boolean {
  if (p.text.includes(text)) return true;
  for (const inflate of [zlib.inflateSync, zlib.inflateRawSync, zlib.gunzipSync]) {
    try {
      if (inflate(raw).toString('utf8').includes(text)) return true;
    } catch {
      // not that compression
    }
  }
  return false;
}

/**
 * Every payload of a run's history, with its raw bytes, as `temporal workflow show -o json` prints it — but its search
 * attributes, which hold no tenant's data (D4: the tenant's name, the job's status) and stay plain for queries, and
 * Temporal's own note of each local activity (its sequence, attempt, type and times; its result is oz0's).
 */
function shown(id: string, runId?: string): Array<{ p: HistoryPayload; raw: Buffer }> {
  const json = workflowJson(temporal.server, 'show', id, runId);
  const out: Array<{ p: HistoryPayload; raw: Buffer }> = [];
  const walk = (v: unknown) => {
    if (Array.isArray(v)) v.forEach(walk);
    else if (v && typeof v === 'object') {
      const o = v as Record<string, unknown>;
      if (typeof o.data === 'string' && o.metadata && typeof o.metadata === 'object') {
        out.push({ p: payloadsIn(o)[0]!, raw: Buffer.from(o.data, 'base64') });
      }
      for (const [k, child] of Object.entries(o)) {
        if (k === 'searchAttributes') continue;
        // A local activity's marker: Temporal's own note of it (its sequence, attempt, type, times), and its result.
        if (k === 'details' && o.markerName === 'core_local_activity') {
          walk((child as Record<string, unknown>).result);
          continue;
        }
        walk(child);
      }
    }
  };
  walk(json);
  return out;
}

/** The config with sealing off: new payloads plain, the sealed ones still opening with the file's keys. */
function unsealed(config: LoadedConfig): LoadedConfig {
  const seal = { ...(config.payloads.seal as object), newPayloads: 'plain' as const, platformKeys: [] };
  return { ...config, payloads: { ...config.payloads, seal } };
}

async function runJob(config: LoadedConfig, spec: object, id = uniqueId('sealed')) {
  const { shown, ...rest } = await runWhole(config, spec, id);
  return { ...rest, trace: shown };
}

function canarySpec(tenant: string, words: string) {
  return {
    tenant,
    steps: [
      { call: 'everything.echo', args: { message: words } },
      // An answer past the threshold, to the store: its object must be sealed as well.
      { call: 'pages.read_page', args: { kib: 600 } },
      // A server that says the canary on stderr, then dies: the failure quotes it, and it is the tenant's data too.
      { call: 'blurt.note', args: { text: `going on with ${words}` } },
      { call: 'blurt.die' },
    ],
  };
}

test('D4: a canary sent as a call’s argument, echoed back and said by a dying server lies nowhere in the history, compressed or not; every payload sealed with the tenant’s key, its policy’s with the platform’s; the store’s objects sealed too; the job’s own client reads it all', async () => {
  const config = temporal.config({ servers: SERVERS, tools: TOOLS });
  const tenant = uniqueId('acme');
  const words = canary();
  const { id, runId, raw, trace } = await runJob(config, canarySpec(tenant, words));

  // The job's own client reads everything: the echo, the stored answer, the failure's words.
  const [echo, page, , died] = callsOf(trace);
  expect(JSON.stringify(echo.result.content)).toContain(words);
  expect(page.result.isError).toBe(false);
  expect(JSON.stringify(died)).toContain(`going on with ${words}`);
  expect(raw.steps).toHaveLength(4);

  // Temporal's side: nothing readable, and every payload sealed or a store's claim.
  const history = shown(id, runId);
  expect(history.length).toBeGreaterThan(8);
  expect(history.filter(({ p, raw: r }) => holds(p, words, r))).toEqual([]);
  const all = JSON.stringify(workflowJson(temporal.server, 'show', id, runId));
  expect(all).not.toContain(words);
  expect(all).not.toContain(Buffer.from(words).toString('base64').slice(0, 24));
  const kinds = history.map(({ p }) => p.metadata.encoding ?? p.metadata.messageType ?? '?');
  const sealed = history.filter(({ p }) => p.metadata.encoding === 'binary/oz0-sealed');
  // (A store's claim, were a sealed payload still past the threshold: sealing compresses the answer first.)
  const claims = history.filter(({ p }) => /ExternalStorageReference/.test(JSON.stringify(p.metadata)));
  expect(sealed.length + claims.length).toBe(history.length);
  expect(kinds).not.toContain('json/plain');
  expect(new Set(sealed.map(({ p }) => p.metadata['oz0-key'].split('/')[0]))).toEqual(new Set([tenant]));
  expect(new Set(sealed.map(({ p }) => p.metadata['oz0-job']))).toEqual(new Set([id]));
  // The failure's message is sealed as well: Temporal shows it as Temporal's SDKs show an encoded one.
  expect(all).toContain('Encoded failure');

  // The platform's own workflows: the tenant's policy, sealed with the platform's key.
  const policy = shown(policyWorkflowId(tenant));
  expect(policy.length).toBeGreaterThan(0);
  expect(policy.every(({ p }) => p.metadata['oz0-key']?.startsWith('@platform/'))).toBe(true);

  // The store's side: the answer's object holds no byte of the answer, raw or inflated.
  const text = (page.result.content[0] as { text: string }).text;
  const piece = text.slice(100_000, 100_064);
  const objects = path.resolve(config.baseDir, config.node.stateDir, 'payloads', 'objects', tenant);
  const files = fs.readdirSync(objects, { recursive: true, withFileTypes: true }).filter((f) => f.isFile());
  expect(files.length).toBeGreaterThanOrEqual(1);
  for (const f of files) {
    const bytes = fs.readFileSync(path.join(f.parentPath, f.name));
    expect(bytes.includes(piece)).toBe(false);
    expect(bytes.includes('binary/oz0-sealed')).toBe(true);
  }
}, 180_000);

test('D4 (the control): the same job with sealing off lies in history in the clear — the canary in its argument, its echo and the dying server’s words', async () => {
  const base = temporal.config({ servers: SERVERS, tools: TOOLS });
  const config = unsealed(base);
  const words = canary();
  const { id, runId } = await runJob(config, canarySpec(uniqueId('acme'), words));
  const history = shown(id, runId);
  expect(history.filter(({ p, raw }) => holds(p, words, raw)).length).toBeGreaterThanOrEqual(3);
  // The dying server's words, in the failure's message (its encoded attributes, plain with sealing off).
  expect(history.some(({ p }) => p.text.includes(`going on with ${words}`) && p.text.includes('stack_trace'))).toBe(
    true,
  );
}, 180_000);

test('D4, D6: keys by reference; a client with acme’s key alone reads acme’s job and says which key of beta’s it lacks; a node without beta’s key fails beta’s job alone — acme’s finishes beside it — and beta’s finishes on a node that has it', async () => {
  const acmeKey = randomBytes(32).toString('base64');
  const betaKey = randomBytes(32).toString('hex');
  const env = { OZ0_TEST_ACME_KEY: acmeKey, OZ0_TEST_BETA_KEY: betaKey };
  Object.assign(process.env, env);
  const tenants = { acme: { keys: ['env:OZ0_TEST_ACME_KEY'] }, beta: { keys: ['env:OZ0_TEST_BETA_KEY'] } };
  const both = temporal.config({ servers: SERVERS, tools: TOOLS, tenants });
  // The same key folder (the platform's key, as one deployment's processes share it), and acme's key alone.
  const acmeOnly: LoadedConfig = { ...both, tenants: { acme: both.tenants.acme } };
  const words = canary();
  const spec = (tenant: string) => ({ tenant, steps: [{ call: 'everything.echo', args: { message: words } }] });

  const acmeJob = await runJob(both, spec('acme'));
  const betaJob = await runJob(both, spec('beta'));
  const history = shown(betaJob.id, betaJob.runId);
  expect(new Set(history.map(({ p }) => p.metadata['oz0-key']))).toEqual(new Set([`beta/${keyOf(betaKey)}`]));

  const reader = await connectJobClient(acmeOnly);
  try {
    // Each job's result as it lies in its history, read by this client alone.
    const acme: JobTrace = await reader.client.workflow.getHandle(acmeJob.id).result();
    expect(JSON.stringify(acme)).toContain(words);
    await expect(reader.client.workflow.getHandle(betaJob.id).result()).rejects.toThrow(
      new RegExp(`sealed with beta's key ${keyOf(betaKey)}, which this process does not have`),
    );
  } finally {
    await reader.close();
  }

  // A node with acme's key alone: beta's new job is stuck on it, saying which key; acme's runs beside it.
  const jc = await connectJobClient(both);
  const lacking = await createNode({ config: acmeOnly, logger });
  const betaId = uniqueId('beta-stuck');
  try {
    await lacking.runUntil(async () => {
      await startJob(jc, spec('beta'), { workflowId: betaId });
      const acmeHandle = await startJob(jc, spec('acme'), { workflowId: uniqueId('acme-beside') });
      const beside: JobTrace = await acmeHandle.result();
      expect(callsOf(beside)[0].result.isError).toBe(false);
      const stuck = await eventually(() => stuckOf(jc.client, betaId), 60_000, 'beta’s job stuck');
      expect(stuck.why).toMatch(new RegExp(`beta's key ${keyOf(betaKey)}, which this process does not have`));
      expect(await jobStatus(jc.client, betaId)).toBe('stuck');
    });
    // A node that has beta's key finishes it.
    const node = await createNode({ config: both, logger });
    await node.runUntil(async () => {
      const done: JobTrace = await jc.client.workflow.getHandle(betaId).result();
      expect(JSON.stringify(callsOf(done)[0].result.content)).toContain(words);
    });
  } finally {
    await jc.close();
  }
}, 240_000);

test('D4: `oz0 key rotate` seals new payloads with a new key within seconds on a running node, the older key still opening the older jobs; `oz0 key list` says which seals', async () => {
  // The CLI and the node share one config file, as one machine's processes do.
  const { file, config: loaded } = temporal.configFile({ servers: SERVERS, tools: TOOLS });
  const folder = (loaded.payloads.seal as { folder: string }).folder;
  const tenant = uniqueId('acme');
  const words = canary();
  const spec = { tenant, steps: [{ call: 'everything.echo', args: { message: words } }] };
  const keyIds = (id: string) => new Set(shown(id).map(({ p }) => p.metadata['oz0-key']));

  const jc = await connectJobClient(loaded);
  const node = await createNode({ config: loaded, logger });
  try {
    await node.runUntil(async () => {
      const first = await startJob(jc, spec, { workflowId: uniqueId('before-rotate') });
      await first.result();
      const [old] = [...keyIds(first.workflowId)];
      const rotated = await oz0(['key', 'rotate', tenant, '--json', '--config', file]);
      expect(rotated.code).toBe(0);
      const made = JSON.parse(rotated.stdout) as { id: string; older: string[] };
      expect([`${tenant}/${made.older[0]}`]).toEqual([old]);
      expect(made.id).not.toBe(made.older[0]);
      // The running node takes the new key within its 10 s: a job after that is sealed with it alone.
      const after = await eventually(
        async () => {
          const h = await startJob(jc, spec, { workflowId: uniqueId('after-rotate') });
          await h.result();
          const ids = keyIds(h.workflowId);
          return ids.size === 1 && ids.has(`${tenant}/${made.id}`) ? h : undefined;
        },
        30_000,
        'a job sealed with the new key',
      );
      // Both read whole, each with its own key.
      for (const h of [first, after]) {
        const trace = await jobTrace(jc.client, h.workflowId, { data: jc.data, whole: true });
        expect(JSON.stringify(callsOf(trace)[0].result.content)).toContain(words);
      }
      const listed = await oz0(['key', 'list', tenant, '--json', '--config', file]);
      const keys = JSON.parse(listed.stdout) as Array<{ id: string; seals: boolean; from: string }>;
      expect(keys.map((k) => [k.id, k.seals])).toEqual([
        [made.id, true],
        [made.older[0], false],
      ]);
      expect(keys.every((k) => k.from.startsWith(folder))).toBe(true);
      const text = await oz0(['key', 'list', tenant, '--config', file]);
      expect(text.stdout).toMatch(new RegExp(`${tenant}\\s+${made.id}\\s+seals new payloads`));
    });
  } finally {
    await jc.close();
  }
}, 180_000);

test('D6: a job started on a node that did not seal finishes on one that does: its old payloads plain, its new ones sealed, all of it read whole', async () => {
  const tenant = uniqueId('acme');
  // Its second call waits for a person's yes (A4), so that the job waits while its node is replaced.
  const policy = { 'everything.*': 'allow', 'pages.*': 'confirm' };
  const base = temporal.config({ servers: SERVERS, tools: TOOLS, tenants: { [tenant]: { policy } } });
  const plain = unsealed(base);
  const words = canary();
  const id = uniqueId('before-seal');
  const spec = {
    tenant,
    steps: [
      { call: 'everything.echo', args: { message: `${words} 1` } },
      { call: 'pages.read_page', args: { kib: 1 } },
      { call: 'everything.echo', args: { message: `${words} 2` } },
    ],
  };
  const jc = await connectJobClient(plain);
  try {
    const before = await createNode({ config: plain, logger });
    await before.runUntil(() =>
      startJob(jc, spec, { workflowId: id }).then(() =>
        eventually(async () => ((await jobStatus(jc.client, id)) === 'waiting' ? true : undefined), 30_000, 'the wait'),
      ),
    );
  } finally {
    await jc.close();
  }
  const sealedClient = await connectJobClient(base);
  try {
    const after = await createNode({ config: base, logger });
    const trace = await after.runUntil(async () => {
      await answerCall(sealedClient.client, id, { approve: true, by: 'the test' });
      await sealedClient.client.workflow.getHandle(id).result();
      return jobTrace(sealedClient.client, id, { data: sealedClient.data, whole: true });
    });
    const texts = callsOf(trace).map((c) => JSON.stringify(c.result.content));
    expect(texts[0]).toContain(`${words} 1`);
    expect(texts[2]).toContain(`${words} 2`);
    // The first answer came back on the node that did not seal: it lies in the clear; the last, sealed, and the job's
    // result too (its spec, from its start, stays as it was written: plain).
    interface ShownEvent {
      eventId: string;
      activityTaskScheduledEventAttributes?: { activityId: string };
      activityTaskCompletedEventAttributes?: { scheduledEventId: string; result: unknown };
      workflowExecutionCompletedEventAttributes?: { result: unknown };
    }
    const { events } = workflowJson(temporal.server, 'show', id) as { events: ShownEvent[] };
    const answerOf = (activityId: string) => {
      const scheduled = events.find((e) => e.activityTaskScheduledEventAttributes?.activityId === activityId)!;
      const done = events.find((e) => e.activityTaskCompletedEventAttributes?.scheduledEventId === scheduled.eventId)!;
      return payloadsIn(done.activityTaskCompletedEventAttributes!.result)[0]!;
    };
    expect(answerOf('c1').metadata.encoding).toBe('json/plain');
    expect(answerOf('c1').text).toContain(`${words} 1`);
    expect(answerOf('c3').metadata).toMatchObject({ encoding: 'binary/oz0-sealed', 'oz0-owner': tenant });
    const completed = events.find((e) => e.workflowExecutionCompletedEventAttributes)!;
    const result = payloadsIn(completed.workflowExecutionCompletedEventAttributes!.result)[0]!;
    expect(result.metadata.encoding).toBe('binary/oz0-sealed');
    expect(result.text).not.toContain(words);
  } finally {
    await sealedClient.close();
  }
}, 180_000);
