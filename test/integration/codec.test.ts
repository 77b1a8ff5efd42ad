/**
 * D5: the Temporal UI reads a tenant's jobs decoded for that tenant's signed-in people alone. The real dev server's
 * Web UI behind oz0's front (worker/ui-front.ts), `oz0 inbox` as its own process (its codec server), people signed in
 * through an identity provider of the test's own (oidc-provider) in headless Chromium: ann approves acme's calls, vic
 * views acme's jobs, bob approves beta's, olga operates the platform. Each refusal beside its positive control.
 */
import fs from 'node:fs';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import type { Browser, BrowserContext, Page } from 'puppeteer-core';
import { connectJobClient, startJob } from '../../client/jobs';
import type { JobClient } from '../../client/jobs';
import { loadConfig } from '../../common/config';
import type { LoadedConfig } from '../../common/config';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import { freePort, startDevServer } from '../../worker/dev-server';
import type { DevServer } from '../../worker/dev-server';
import { findTemporalCli } from '../../worker/temporal-cli';
import type { RunningAuthServer } from '../../examples/auth-server';
import { policyWorkflowId } from '../../model/policy-rules';
import { findChromium, launchBrowser, signInToInbox, textOf, waitForText } from '../helpers/browser';
import { newSecret, startInboxSignIn } from '../helpers/oauth';
import { ROOT, eventually, logger, testKeys, tmpDir, uniqueId } from '../helpers/temporal';
import { oz0 } from '../helpers/cli';
import { runLogDir } from '../logs';

const chromium = findChromium();
const cli = findTemporalCli({ install: false });
const why = 'why' in chromium ? chromium.why : cli ? undefined : 'no Temporal CLI: its dev server serves the Web UI';
if (why) console.warn(`codec.test.ts skipped: ${why}`);
const withBrowser = why ? test.skip : test;

const acme = uniqueId('acme');
const beta = uniqueId('beta');
let as: RunningAuthServer;
let server: DevServer;
let inbox: { url: string; child: ChildProcess; said: () => string };
let node: Oz0Node;
let running: Promise<void>;
let jc: JobClient;
let browser: Browser;
let file: string;
let config: LoadedConfig;
const jobs: Record<string, { id: string; canary: string }> = {};

beforeAll(async () => {
  if (why) return;
  const inboxPort = await freePort();
  const secret = newSecret('inbox');
  as = await startInboxSignIn(`http://127.0.0.1:${inboxPort}`, secret, [
    { login: 'ann', email: 'ann@acme.test', groups: [] },
    { login: 'vic', email: 'vic@acme.test', groups: ['acme-readers'] },
    { login: 'bob', email: 'bob@beta.test', groups: [] },
    { login: 'olga', email: 'olga@ops.test', groups: [] },
  ]);
  server = await startDevServer({
    cli,
    logFile: path.join(runLogDir(), 'codec.temporal-server.log'),
    uiCodec: `http://127.0.0.1:${inboxPort}`,
  });
  const dir = tmpDir();
  file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      temporal: { address: server.address, taskQueue: uniqueId('codec') },
      servers: { reader: { command: 'node', args: [path.join(ROOT, 'dist', 'examples', 'reader.js')] } },
      tenants: {
        [acme]: { approvers: ['ann@acme.test'], viewers: ['group:acme-readers'] },
        [beta]: { approvers: { 'reader.*': ['bob@beta.test'] } },
      },
      inbox: {
        port: inboxPort,
        oidc: {
          issuer: as.issuer,
          clientId: 'oz0-inbox',
          clientSecret: 'env:OZ0_INBOX_SECRET',
          // The provider's groups (vic reads acme's jobs as one of group:acme-readers).
          scopes: 'openid email profile groups',
        },
        operators: ['olga@ops.test'],
        temporalUi: server.uiUrl,
      },
      payloads: { seal: { folder: testKeys() } },
      node: { stateDir: path.join(dir, 'state') },
    }),
  );
  config = loadConfig({ file });
  node = await createNode({ config, logger });
  running = node.run();
  jc = await connectJobClient(config);
  for (const tenant of [acme, beta]) {
    const canary = `canary-${uniqueId(tenant.slice(0, 4))}`;
    const handle = await startJob(jc, { tenant, steps: [{ call: 'reader.echo', args: { text: canary } }] });
    await handle.result();
    jobs[tenant] = { id: handle.workflowId, canary };
  }
  const child = spawn(path.join(ROOT, 'bin', 'oz0'), ['inbox', '--config', file], {
    env: { ...process.env, OZ0_INBOX_SECRET: secret },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let said = '';
  child.stdout!.on('data', (d: Buffer) => (said += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (said += d.toString()));
  const url = await eventually(async () => /oz0 inbox: (http\S+)\/ /.exec(said)?.[1], 30_000, `oz0 inbox: ${said}`);
  inbox = { url, child, said: () => said };
  browser = await launchBrowser((chromium as { path: string }).path);
}, 180_000);

afterAll(async () => {
  await browser?.close();
  inbox?.child.kill('SIGTERM');
  await node?.shutdown();
  await running;
  await jc?.close();
  await server?.stop();
  await as?.stop();
});

/** A browser of one person's own (a fresh profile), signed in to the inbox through the provider's pages. */
async function signedIn(login: string): Promise<{ context: BrowserContext; page: Page; cookie: string }> {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  await page.setViewport({ width: 1680, height: 1000 });
  await signInToInbox(page, inbox.url, login);
  const cookies = await page.cookies(inbox.url);
  const session = cookies.find((c) => c.name === 'oz0_inbox');
  expect(session).toMatchObject({ httpOnly: true, sameSite: 'Lax' });
  return { context, page, cookie: `oz0_inbox=${session!.value}` };
}

/** A job's payloads as Temporal keeps them (its history's but its search attributes), as the UI sends them. */
async function historyPayloads(workflowId: string): Promise<Array<{ metadata: Record<string, string>; data: string }>> {
  const history = await jc.client.workflow.getHandle(workflowId).fetchHistory();
  const found: Array<{ metadata: Record<string, string>; data: string }> = [];
  const walk = (v: unknown): void => {
    if (!v || typeof v !== 'object') return;
    if (Array.isArray(v)) return v.forEach(walk);
    const o = v as { metadata?: Record<string, Uint8Array>; data?: Uint8Array };
    if (o.metadata && typeof o.metadata === 'object' && o.metadata.encoding instanceof Uint8Array) {
      found.push({
        metadata: Object.fromEntries(
          Object.entries(o.metadata).map(([k, b]) => [k, Buffer.from(b).toString('base64')]),
        ),
        data: Buffer.from(o.data ?? new Uint8Array()).toString('base64'),
      });
      return;
    }
    // Search attributes are the one thing Temporal must read (D4 says what they hold: no tenant data).
    for (const [k, x] of Object.entries(o)) if (k !== 'searchAttributes') walk(x);
  };
  walk(history.events);
  return found;
}

const encodingOf = (p: { metadata: Record<string, string> }) => Buffer.from(p.metadata.encoding, 'base64').toString();
const textOfPayloads = (ps: Array<{ data: string }>) =>
  ps.map((p) => Buffer.from(p.data, 'base64').toString()).join('');

async function codec(op: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${inbox.url}/codec/${op}?preserveStorageRefs=true`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Namespace': 'default', ...headers },
    body: JSON.stringify(body),
  });
  return {
    status: res.status,
    headers: res.headers,
    json: (await res.json().catch(() => ({}))) as Record<string, unknown>,
  };
}

withBrowser(
  'D5: the codec server opens a tenant’s payloads for the people it names — approvers and viewers — and gives back sealed what is another’s, the platform’s to its operators alone; no sign-in, no other origin, no encode',
  async () => {
    const ann = await signedIn('ann');
    const vic = await signedIn('vic');
    const bob = await signedIn('bob');
    const olga = await signedIn('olga');
    try {
      // As they lie in Temporal: every one sealed but a local activity's marker (the SDK's own record of when it
      // ran: no tenant data, docs/data.md), no canary anywhere.
      const sealedOf = async (id: string) => {
        const all = await historyPayloads(id);
        const plain = all.filter((p) => encodingOf(p) !== 'binary/oz0-sealed');
        for (const p of plain)
          expect(Buffer.from(p.data, 'base64').toString()).toMatch(/^\{"seq":\d+,"attempt":\d+,"activity_id"/);
        expect(textOfPayloads(all)).not.toMatch(/canary-/);
        return all.filter((p) => encodingOf(p) === 'binary/oz0-sealed');
      };
      const acmePayloads = await sealedOf(jobs[acme].id);
      const betaPayloads = await sealedOf(jobs[beta].id);
      const policyPayloads = await sealedOf(policyWorkflowId(acme));
      expect(Math.min(acmePayloads.length, betaPayloads.length, policyPayloads.length)).toBeGreaterThan(0);
      const both = [...acmePayloads, ...betaPayloads];

      // No sign-in: nothing.
      expect((await codec('decode', { payloads: both })).status).toBe(401);
      // ann (acme's approver) and vic (acme's viewer, by group): acme's opened, beta's given back as they came.
      for (const who of [ann, vic]) {
        const res = await codec('decode', { payloads: both }, { Cookie: who.cookie });
        expect(res.status).toBe(200);
        const out = res.json.payloads as typeof both;
        expect(out).toHaveLength(both.length);
        const mine = out.slice(0, acmePayloads.length);
        const theirs = out.slice(acmePayloads.length);
        expect(mine.every((p) => encodingOf(p) !== 'binary/oz0-sealed')).toBe(true);
        expect(textOfPayloads(mine)).toContain(jobs[acme].canary);
        expect(theirs).toEqual(betaPayloads);
      }
      // bob (beta's approver): the other way round.
      const bobs = await codec('decode', { payloads: both }, { Cookie: bob.cookie });
      const bobOut = bobs.json.payloads as typeof both;
      expect(bobOut.slice(0, acmePayloads.length)).toEqual(acmePayloads);
      expect(textOfPayloads(bobOut.slice(acmePayloads.length))).toContain(jobs[beta].canary);
      // The platform's own workflows (acme's policy) open for its operators alone, not for acme's approver.
      expect((await codec('decode', { payloads: policyPayloads }, { Cookie: ann.cookie })).json.payloads).toEqual(
        policyPayloads,
      );
      const olgas = (await codec('decode', { payloads: policyPayloads }, { Cookie: olga.cookie })).json
        .payloads as typeof both;
      expect(olgas.every((p) => encodingOf(p) === 'json/plain')).toBe(true);
      // ...and olga reads no tenant's job.
      expect((await codec('decode', { payloads: acmePayloads }, { Cookie: olga.cookie })).json.payloads).toEqual(
        acmePayloads,
      );

      // CORS: the Temporal UI's origin may call it with the person's cookie; another origin may not, even signed in.
      const ui = new URL(server.uiUrl!).origin;
      const preflight = await fetch(`${inbox.url}/codec/decode`, {
        method: 'OPTIONS',
        headers: {
          Origin: ui,
          'Access-Control-Request-Method': 'POST',
          'Access-Control-Request-Headers': 'content-type,x-namespace',
        },
      });
      expect(preflight.status).toBe(204);
      expect(preflight.headers.get('access-control-allow-origin')).toBe(ui);
      expect(preflight.headers.get('access-control-allow-credentials')).toBe('true');
      const fromUi = await codec('decode', { payloads: acmePayloads }, { Cookie: ann.cookie, Origin: ui });
      expect(fromUi.status).toBe(200);
      expect(fromUi.headers.get('access-control-allow-origin')).toBe(ui);
      const evil = 'http://127.0.0.1:1';
      const elsewhere = await fetch(`${inbox.url}/codec/decode`, {
        method: 'OPTIONS',
        headers: { Origin: evil, 'Access-Control-Request-Method': 'POST' },
      });
      expect(elsewhere.status).toBe(403);
      expect(elsewhere.headers.get('access-control-allow-origin')).toBeNull();
      const fromEvil = await codec('decode', { payloads: acmePayloads }, { Cookie: ann.cookie, Origin: evil });
      expect(fromEvil.status).toBe(403);
      expect(JSON.stringify(fromEvil.json)).not.toContain(jobs[acme].canary);
      // Another namespace, a body that is not a codec request, and encode: refused, saying why.
      expect(
        (await codec('decode', { payloads: acmePayloads }, { Cookie: ann.cookie, 'X-Namespace': 'other' })).status,
      ).toBe(403);
      const bad = await codec('decode', { payloads: [{ data: 'not base64!' }] }, { Cookie: ann.cookie });
      expect(bad.status).toBe(400);
      expect(bad.json.error).toMatch(/^not a codec request: payloads\.0\.data/);
      const encode = await codec('encode', { payloads: acmePayloads }, { Cookie: ann.cookie });
      expect(encode.status).toBe(403);
      expect(encode.json.error).toContain('only opens payloads');

      // A payload in the store (past 256 KiB): history keeps its claim, which decode gives back as it is (the UI's
      // `preserveStorageRefs`); the UI's download fetches the object and opens it, for acme's people only.
      const words = `big-${uniqueId('words')}`;
      const big = await startJob(jc, {
        tenant: acme,
        // Random, so that sealing's deflate leaves it past the threshold.
        steps: [{ call: 'reader.echo', args: { text: `${words} ${randomBytes(400 * 1024).toString('base64')}` } }],
      });
      await big.result();
      const claims = (await historyPayloads(big.workflowId)).filter((p) => encodingOf(p) === 'json/protobuf');
      expect(claims.length).toBeGreaterThan(0);
      expect(textOfPayloads(claims)).not.toContain(words);
      expect((await codec('decode', { payloads: claims }, { Cookie: ann.cookie })).json.payloads).toEqual(claims);
      const [claim] = claims;
      expect((await codec('download', { payloads: [claim] })).status).toBe(401);
      const annGot = await codec('download', { payloads: [claim] }, { Cookie: ann.cookie });
      expect(annGot.status).toBe(200);
      const [opened] = annGot.json.payloads as typeof both;
      expect(encodingOf(opened)).toBe('json/plain');
      expect(textOfPayloads([opened])).toContain(words);
      const bobGot = await codec('download', { payloads: [claim] }, { Cookie: bob.cookie });
      const [stillSealed] = bobGot.json.payloads as typeof both;
      expect(encodingOf(stillSealed)).toBe('binary/oz0-sealed');
      expect(textOfPayloads([stillSealed])).not.toContain(words);
      // Only a claim is downloaded.
      expect((await codec('download', { payloads: acmePayloads.slice(0, 1) }, { Cookie: ann.cookie })).status).toBe(
        400,
      );

      // Every decode recorded: who, which jobs, what was given back sealed; `oz0 inbox decodes` reads it.
      const listed = await oz0(['inbox', 'decodes', '--json', '--config', file]);
      expect(listed.code).toBe(0);
      const records = JSON.parse(listed.stdout) as Array<{
        who: string;
        jobs: string[];
        tenants: string[];
        opened: number;
        refused: number;
        refusedTenants: string[];
      }>;
      const annFirst = records.find((r) => r.who === 'ann@acme.test')!;
      expect(annFirst).toMatchObject({
        tenants: [acme],
        jobs: [jobs[acme].id],
        opened: acmePayloads.length,
        refused: betaPayloads.length,
        refusedTenants: [beta],
      });
      expect(records.find((r) => r.who === 'bob@beta.test')).toMatchObject({ jobs: [jobs[beta].id] });
      expect(records).toContainEqual(
        expect.objectContaining({ who: 'ann@acme.test', op: 'download', jobs: [big.workflowId], opened: 1 }),
      );
      expect(records).toContainEqual(
        expect.objectContaining({ who: 'bob@beta.test', op: 'download', opened: 0, refusedTenants: [acme] }),
      );
      expect(records.filter((r) => r.who === 'olga@ops.test').map((r) => r.tenants)).toContainEqual(['@platform']);
      const table = await oz0(['inbox', 'decodes', '--config', file]);
      expect(table.stdout).toMatch(/^AT\s+WHO\s+OPENED\s+OF\s+JOBS\s+GIVEN BACK SEALED/);
      expect(table.stdout).toContain(jobs[acme].id);
    } finally {
      for (const p of [ann, vic, bob, olga]) await p.context.close();
    }
  },
  180_000,
);

withBrowser(
  'D5 in the real Temporal UI: ann, signed in to the inbox, reads acme’s job decoded there and beta’s sealed; signed out, nothing decodes',
  async () => {
    const jobPage = (tenant: string) =>
      `${server.uiUrl}/namespaces/default/workflows/${encodeURIComponent(jobs[tenant].id)}`;
    const ann = await signedIn('ann');
    try {
      // The UI decodes through its front, same origin, with the inbox's cookie: acme's argument and answer shown.
      await ann.page.goto(jobPage(acme), { waitUntil: 'domcontentloaded', timeout: 60_000 });
      await waitForText(ann.page, [jobs[acme].canary]);
      await ann.page.screenshot({ path: path.join(runLogDir(), 'codec-acme-decoded.png') });
      // beta's job, in the same browser: its page loads, its payloads stay sealed.
      await ann.page.goto(jobPage(beta), { waitUntil: 'domcontentloaded', timeout: 60_000 });
      await waitForText(ann.page, [jobs[beta].id]);
      await new Promise((r) => setTimeout(r, 3000));
      expect(await textOf(ann.page)).not.toContain(jobs[beta].canary);
      await ann.page.screenshot({ path: path.join(runLogDir(), 'codec-beta-sealed.png') });
    } finally {
      await ann.context.close();
    }
    // A browser signed in nowhere: acme's job page shows nothing of it.
    const stranger = await browser.createBrowserContext();
    try {
      const page = await stranger.newPage();
      await page.setViewport({ width: 1680, height: 1000 });
      await page.goto(jobPage(acme), { waitUntil: 'domcontentloaded', timeout: 60_000 });
      await waitForText(page, [jobs[acme].id]);
      await new Promise((r) => setTimeout(r, 3000));
      expect(await textOf(page)).not.toContain(jobs[acme].canary);
    } finally {
      await stranger.close();
    }
    // What the UI opened for ann is in the record, with her job.
    const records = fs.readFileSync(path.join(config.node.stateDir, 'decodes.jsonl'), 'utf8');
    expect(records).toContain(jobs[acme].id);
  },
  180_000,
);
