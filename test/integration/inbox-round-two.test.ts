/**
 * A11-A12 (issue 55): what a hostile person tries on the approvals inbox, each beside its control, in Chromium against
 * `oz0 inbox` run as processes of their own (two behind one port, as a load balancer without sticky sessions puts
 * them), with the identity provider's own sign-in pages (npm's oidc-provider):
 * - a callback begun in one browser signs nobody in when opened in another; in its own browser it signs in;
 * - every page has a Content-Security-Policy: a script injected into the page does not run, the page's own does (and
 *   the same injection without the policy runs);
 * - someone who may not answer a call gets one refusal whether it waits or not;
 * - sessions outlive a restart of the inbox, are known to both processes, and a sign-out ends them on both.
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import type { Browser, BrowserContext, HTTPRequest, Page } from 'puppeteer-core';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { setPolicyUpdate, waitingCallsQuery } from '../../model/messages';
import { freePort } from '../../worker/dev-server';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import type { RunningAuthServer } from '../../examples/auth-server';
import { findChromium, launchBrowser, signInToInbox, textOf, waitForText } from '../helpers/browser';
import { newSecret, startInboxSignIn } from '../helpers/oauth';
import { startProbeJob, waitsForPerson } from '../helpers/waiting';
import { ROOT, eventually, fixture, logger, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();
const chromium = findChromium();
const why = 'why' in chromium ? chromium.why : undefined;
if (why) console.warn(`inbox-round-two.test.ts skipped: ${why}`);
const withBrowser = why ? test.skip : test;

const acme = uniqueId('acme');
const beta = uniqueId('beta');
const secret = newSecret('inbox');
let as: RunningAuthServer;
let node: Oz0Node;
let browser: Browser;
let config: ReturnType<typeof temporal.config>;
/** The address people use: a proxy that hands each request to the next inbox process in turn. */
let front: { url: string; served: number[]; close(): Promise<void> };
/** Each inbox process's config file (its own port) and the process, when running. */
const inboxes: Array<{ file: string; port: number; child?: ChildProcess; said: string }> = [];

/** `oz0 inbox` on its config file, as an operator runs it; resolves once it listens. */
async function startInbox(i: number): Promise<void> {
  const one = inboxes[i];
  one.said = '';
  const child = spawn(path.join(ROOT, 'bin', 'oz0'), ['inbox', '--config', one.file], {
    env: { ...process.env, OZ0_INBOX_SECRET: secret },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child.stdout!.on('data', (d: Buffer) => (one.said += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (one.said += d.toString()));
  one.child = child;
  await eventually(async () => (/oz0 inbox: http\S+\/ /.test(one.said) ? true : undefined), 30_000, 'an inbox');
}

async function stopInbox(i: number): Promise<void> {
  const child = inboxes[i].child;
  if (!child || child.exitCode !== null) return;
  const exited = new Promise((resolve) => child.once('exit', () => resolve(true)));
  child.kill('SIGTERM');
  // A person's page open on it (its live list) must not keep it from stopping.
  let timer: NodeJS.Timeout | undefined;
  const stopped = await Promise.race([exited, new Promise((resolve) => (timer = setTimeout(resolve, 15_000, false)))]);
  clearTimeout(timer);
  if (!stopped) {
    child.kill('SIGKILL');
    throw new Error(`oz0 inbox did not stop within 15 s of SIGTERM: ${inboxes[i].said}`);
  }
}

/** A round-robin front for the inbox processes that run (no stickiness: each request to the next). */
async function startFront(port: number): Promise<typeof front> {
  let next = 0;
  const served = inboxes.map(() => 0);
  const server = http.createServer((req, res) => {
    const up = inboxes.map((_, i) => (next + i) % inboxes.length).find((i) => inboxes[i].child?.exitCode === null);
    next++;
    if (up === undefined) {
      res.writeHead(502).end('no inbox runs');
      return;
    }
    served[up]++;
    const ahead = http.request(
      {
        host: '127.0.0.1',
        port: inboxes[up].port,
        path: req.url,
        method: req.method,
        headers: req.headers,
        agent: false,
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      },
    );
    ahead.on('error', () => res.writeHead(502).end());
    req.pipe(ahead);
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${port}`,
    served,
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

beforeAll(async () => {
  if (why) return;
  const frontPort = await freePort();
  as = await startInboxSignIn(`http://127.0.0.1:${frontPort}`, secret, [
    { login: 'ann', email: 'ann@acme.test', groups: [] },
    { login: 'bob', email: 'bob@beta.test', groups: [] },
  ]);
  const inboxOf = (port: number) => ({
    port,
    publicUrl: `http://127.0.0.1:${frontPort}`,
    oidc: { issuer: as.issuer, clientId: 'oz0-inbox', clientSecret: 'env:OZ0_INBOX_SECRET' },
  });
  const ports = [await freePort(), await freePort()];
  const first = temporal.configFile({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')] } },
    tenants: { [acme]: { approvers: ['ann@acme.test'] }, [beta]: { approvers: ['bob@beta.test'] } },
    inbox: inboxOf(ports[0]),
  });
  config = first.config;
  // The second process: the same config but its port (the same Temporal, task queue and keys).
  const second = path.join(first.dir, 'oz0.second.config.json');
  const written = JSON.parse(fs.readFileSync(first.file, 'utf8')) as { inbox: object };
  fs.writeFileSync(second, JSON.stringify({ ...written, inbox: inboxOf(ports[1]) }));
  inboxes.push({ file: first.file, port: ports[0], said: '' }, { file: second, port: ports[1], said: '' });
  node = await createNode({ config, logger });
  void node.run();
  for (const tenant of [acme, beta])
    await changePolicy(policyTargetOf(config, temporal.client), tenant, setPolicyUpdate, ['probe.*', 'confirm']);
  await Promise.all([startInbox(0), startInbox(1)]);
  front = await startFront(frontPort);
  browser = await launchBrowser((chromium as { path: string }).path);
}, 120_000);

afterAll(async () => {
  await browser?.close();
  await front?.close();
  await Promise.all(inboxes.map((_, i) => stopInbox(i)));
  await node?.shutdown();
  await as?.stop();
});

const start = (tenant: string, text: string) => startProbeJob(temporal.client, config.temporal.taskQueue, tenant, text);
const waits = waitsForPerson;

/** A browser of its own: its own cookies, as another person's machine. */
async function freshPage(): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.createBrowserContext();
  const page = await context.newPage();
  return { context, page };
}

/** Posts a form from the page (its cookies), not following the redirect. */
function post(page: Page, fields: Record<string, string>) {
  return page.evaluate(async (body) => {
    const res = await fetch('answer', { method: 'POST', body: new URLSearchParams(body), redirect: 'manual' });
    return res.status;
  }, fields);
}

const csrfOf = (page: Page) =>
  page.$eval('input[name=csrf]', (el) => (el as unknown as { value: string }).value).catch(() => '');

withBrowser(
  'A11: a sign-in is bound to the browser that began it — its callback opened in another browser signs nobody in',
  async () => {
    const begun = await freshPage();
    // bob begins a sign-in; the provider's redirect back (its code and state) is caught before the inbox sees it.
    let callback: string | undefined;
    const catchCallback = (req: HTTPRequest) => {
      if (req.isInterceptResolutionHandled()) return;
      if (req.url().startsWith(`${front.url}/callback`)) {
        callback = req.url();
        void req.abort().catch(() => undefined);
      } else void req.continue().catch(() => undefined);
    };
    await begun.page.setRequestInterception(true);
    begun.page.on('request', catchCallback);
    await begun.page.goto(`${front.url}/login`, { waitUntil: 'domcontentloaded' });
    await begun.page.waitForSelector('input[name=login]', { timeout: 30_000 });
    await begun.page.type('input[name=login]', 'bob');
    await begun.page.type('input[name=password]', 'any');
    await begun.page.click('button[type=submit]');
    // The provider's consent page, the first time: agreed to.
    await eventually(
      async () => {
        if (callback) return true;
        await begun.page.click('button[type=submit]').catch(() => undefined);
        return undefined;
      },
      30_000,
      "the provider's redirect back to the inbox",
    );
    const sent = new URL(callback!);
    expect(sent.searchParams.get('code')).toBeTruthy();
    expect(sent.searchParams.get('state')).toBeTruthy();
    begun.page.off('request', catchCallback);
    await begun.page.setRequestInterception(false);

    // Another browser opens it: refused, and nobody is signed in there.
    const other = await freshPage();
    const refused = await other.page.goto(callback!, { waitUntil: 'domcontentloaded' });
    expect(refused?.status()).toBe(400);
    expect(await textOf(other.page)).toContain('That sign-in was not begun in this browser');
    await other.page.goto(`${front.url}/`, { waitUntil: 'domcontentloaded' });
    expect(await textOf(other.page)).not.toContain('signed in as');
    expect((await other.context.cookies()).map((c) => c.name)).not.toContain('oz0_inbox');

    // The control: the browser that began it opens the same callback and is signed in as bob.
    await begun.page.goto(callback!, { waitUntil: 'domcontentloaded' });
    await waitForText(begun.page, ['signed in as bob@beta.test']);
    const cookie = (await begun.context.cookies()).find((c) => c.name === 'oz0_inbox');
    expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Lax' });
    await Promise.all([begun.context.close(), other.context.close()]);
  },
  120_000,
);

withBrowser(
  'A11: every page has a Content-Security-Policy: the page’s own script runs, an injected one does not (and does without the policy)',
  async () => {
    const { context, page } = await freshPage();
    // The sign-in page, and its error pages, carry the policy too.
    for (const at of ['/', '/callback?state=x&code=y']) {
      const res = await page.goto(`${front.url}${at}`, { waitUntil: 'domcontentloaded' });
      expect(res?.headers()['content-security-policy']).toMatch(/frame-ancestors 'none'/);
    }
    await signInToInbox(page, front.url, 'ann');
    const res = await page.goto(`${front.url}/`, { waitUntil: 'domcontentloaded' });
    const policy = res!.headers()['content-security-policy'];
    expect(policy).toMatch(/script-src 'nonce-[A-Za-z0-9+/=]+'/);
    expect(policy).toMatch(/default-src 'none'/);
    // The page's own script ran (it follows the list live): its EventSource is there, and nothing was refused.
    const refusals: string[] = [];
    page.on('console', (m) => m.text().includes('Content Security Policy') && refusals.push(m.text()));
    await page.reload({ waitUntil: 'networkidle2' }).catch(() => undefined);
    expect(await page.evaluate('typeof events')).toBe('object');
    expect(refusals).toEqual([]);

    // An injected inline script (as a hole in the page's escaping would put one there), with and without the policy.
    const cookies = (await context.cookies()).map((c) => `${c.name}=${c.value}`).join('; ');
    const injectedRuns = async (keepPolicy: boolean) => {
      await page.setRequestInterception(true);
      const handler = (req: HTTPRequest) => {
        if (req.isInterceptResolutionHandled()) return;
        if (req.url() !== `${front.url}/`) return void req.continue().catch(() => undefined);
        void (async () => {
          const real = await fetch(`${front.url}/`, { headers: { cookie: cookies } });
          const headers: Record<string, string> = {};
          real.headers.forEach((v, k) => {
            if (keepPolicy || k !== 'content-security-policy') headers[k] = v;
          });
          const body = (await real.text()).replace('</main>', '<script>window.injected = 1</script></main>');
          await req.respond({ status: real.status, headers, body });
        })().catch(() => undefined);
      };
      page.on('request', handler);
      await page.goto(`${front.url}/`, { waitUntil: 'domcontentloaded' });
      const ran = await page.evaluate('window.injected === 1');
      page.off('request', handler);
      await page.setRequestInterception(false);
      return ran;
    };
    expect(await injectedRuns(true)).toBe(false);
    expect(await injectedRuns(false)).toBe(true);
    await context.close();
  },
  120_000,
);

withBrowser(
  'A12: someone who may not answer a call gets the same refusal whether it waits or not',
  async () => {
    const theirs = await start(acme, 'acme-only');
    await waits(theirs);
    const { context, page } = await freshPage();
    await signInToInbox(page, front.url, 'bob');
    const csrf = await csrfOf(page);
    const refusalOf = async () => {
      const status = await post(page, {
        csrf,
        job: theirs.workflowId,
        key: `${theirs.workflowId}/c1`,
        decision: 'approve',
      });
      await page.goto(`${front.url}/`, { waitUntil: 'domcontentloaded' });
      const said = (await page
        .$eval('.flash', (el) => (el as unknown as { textContent: string }).textContent)
        .catch(() => '')) as string;
      return { status, said };
    };
    // While it waits (bob is not acme's approver)...
    const waiting = await refusalOf();
    expect((await theirs.query(waitingCallsQuery)).length).toBe(1);
    // ...and once ann has answered it.
    const ann = await freshPage();
    await signInToInbox(ann.page, front.url, 'ann');
    await waitForText(ann.page, [theirs.workflowId]);
    await Promise.all([
      ann.page.waitForNavigation({ waitUntil: 'domcontentloaded' }),
      ann.page.click(`button[aria-label="Approve probe.probe of ${theirs.workflowId}"]`),
    ]);
    await theirs.result();
    const answered = await refusalOf();
    expect(waiting).toEqual({ status: 0, said: `That call of ${theirs.workflowId} does not wait for you.` });
    expect(answered).toEqual(waiting);
    // The control: ann, who may answer, is told who answered it.
    await post(ann.page, {
      csrf: await csrfOf(ann.page),
      job: theirs.workflowId,
      key: `${theirs.workflowId}/c1`,
      decision: 'approve',
    });
    await ann.page.goto(`${front.url}/`, { waitUntil: 'domcontentloaded' });
    await waitForText(ann.page, [`probe.probe of ${theirs.workflowId} was already approved by ann@acme.test at`]);
    await Promise.all([context.close(), ann.context.close()]);
  },
  120_000,
);

withBrowser(
  'A12: a session outlives a restart of the inbox and is known to both its processes; a sign-out ends it on both',
  async () => {
    const jobs = [await start(acme, 'first'), await start(acme, 'second'), await start(acme, 'third')];
    for (const j of jobs) await waits(j);
    const { context, page } = await freshPage();
    await signInToInbox(page, front.url, 'ann');
    const answer = async (job: (typeof jobs)[number]) => {
      await page.goto(`${front.url}/`, { waitUntil: 'domcontentloaded' });
      await waitForText(page, ['signed in as ann@acme.test', job.workflowId]);
      await Promise.all([
        page.waitForNavigation({ waitUntil: 'domcontentloaded' }),
        page.click(`button[aria-label="Approve probe.probe of ${job.workflowId}"]`),
      ]);
      await waitForText(page, [`Approved probe.probe of ${job.workflowId}.`]);
      expect(callsOf((await job.result()) as JobTrace)[0].question?.answer).toMatchObject({
        approved: true,
        by: 'ann@acme.test',
      });
    };
    // Both processes serve the person (the front hands requests to each in turn): each took some of them.
    const before = [...front.served];
    await answer(jobs[0]);
    expect(front.served[0]).toBeGreaterThan(before[0]);
    expect(front.served[1]).toBeGreaterThan(before[1]);
    for (const i of [0, 1]) expect(inboxes[i].said).not.toMatch(/cannot read its sessions/);
    const answeredBy = () => inboxes.filter((one) => /ann@acme\.test approved/.test(one.said)).length;

    // Both processes restart between two answers: the same browser answers again without signing in.
    await Promise.all([stopInbox(0), stopInbox(1)]);
    await Promise.all([startInbox(0), startInbox(1)]);
    await answer(jobs[1]);
    expect(answeredBy()).toBeGreaterThanOrEqual(1);

    // A sign-out (on whichever process takes it) ends the session on both: the old cookie, replayed, signs nobody in.
    const kept = (await context.cookies()).find((c) => c.name === 'oz0_inbox')!;
    // The control: before the sign-out, the cookie copied into another browser is ann's session there too.
    const replay = await freshPage();
    await replay.context.setCookie({ ...kept });
    await replay.page.goto(`${front.url}/`, { waitUntil: 'domcontentloaded' });
    await waitForText(replay.page, ['signed in as ann@acme.test']);
    await Promise.all([page.waitForNavigation({ waitUntil: 'domcontentloaded' }), page.click('header button')]);
    await waitForText(page, ['Sign in']);
    // Each process trusts what it read of a session for a second (SEEN_MS): past that, no process takes the cookie.
    await new Promise((r) => setTimeout(r, 1500));
    for (let i = 0; i < 4; i++) {
      await replay.page.goto(`${front.url}/`, { waitUntil: 'domcontentloaded' });
      expect(await textOf(replay.page)).not.toContain('signed in as');
    }
    const refused = await replay.page.evaluate(async () => (await fetch('calls')).status);
    expect(refused).toBe(401);
    expect((await jobs[2].query(waitingCallsQuery)).length).toBe(1);
    await jobs[2].cancel();
    await Promise.all([context.close(), replay.context.close()]);
  },
  180_000,
);
