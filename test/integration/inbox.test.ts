/**
 * A8-A9 (issue 46): the approvals inbox as a person uses it, in a real browser (Chromium, driven by puppeteer-core):
 * they sign in with the identity provider (npm's oidc-provider, the examples' authorization server with people who
 * sign in), see their tenant's waiting calls and none of another's, approve one, deny one with a reason, and watch a
 * third leave the page when the CLI answers it. Each answer is checked where it lands: the job's trace names the
 * person the provider vouched for. A person who is not the tenant's approver is refused as for a call that does not
 * wait (A12), and a form without the session's CSRF token is refused.
 */
import type { Browser, Page } from 'puppeteer-core';
import { answerCall } from '../../client/calls';
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import path from 'node:path';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { setPolicyUpdate, waitingCallsQuery } from '../../model/messages';
import { freePort } from '../../worker/dev-server';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import type { RunningAuthServer } from '../../examples/auth-server';
import { artifactsDir, findChromium, launchBrowser, signInToInbox, textOf, waitForText } from '../helpers/browser';
import { newSecret, startInboxSignIn } from '../helpers/oauth';
import { startProbeJob, waitsForPerson } from '../helpers/waiting';
import { ROOT, eventually, fixture, logger, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();
const chromium = findChromium();
const why = 'why' in chromium ? chromium.why : undefined;
if (why) console.warn(`inbox.test.ts skipped: ${why}`);
const withBrowser = why ? test.skip : test;

const acme = uniqueId('acme');
const beta = uniqueId('beta');
let as: RunningAuthServer;
/** `oz0 inbox`, as an operator runs it: a process of its own (openid-client is an ES module, as oidc-provider is). */
let inbox: { url: string; child: ChildProcess; said: () => string };
let node: Oz0Node;
let browser: Browser;
let page: Page;
let config: ReturnType<typeof temporal.config>;

beforeAll(async () => {
  if (why) return;
  const port = await freePort();
  const secret = newSecret('inbox');
  as = await startInboxSignIn(`http://127.0.0.1:${port}`, secret, [
    { login: 'alice', email: 'alice@acme.test', name: 'Alice', groups: ['acme-support'] },
    { login: 'mallory', email: 'mallory@beta.test', groups: ['beta-finance'] },
  ]);
  const written = temporal.configFile({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')] } },
    tenants: {
      [acme]: { approvers: ['alice@acme.test'] },
      [beta]: { approvers: { 'probe.*': ['group:beta-finance'] } },
    },
    inbox: { port, oidc: { issuer: as.issuer, clientId: 'oz0-inbox', clientSecret: 'env:OZ0_INBOX_SECRET' } },
  });
  config = written.config;
  node = await createNode({ config, logger });
  void node.run();
  for (const tenant of [acme, beta])
    await changePolicy(policyTargetOf(config, temporal.client), tenant, setPolicyUpdate, ['probe.*', 'confirm']);
  const child = spawn(
    path.join(ROOT, 'bin', 'oz0'),
    ['inbox', '--config', written.file, '--temporal-ui', 'http://127.0.0.1:8233'],
    { env: { ...process.env, OZ0_INBOX_SECRET: secret }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let said = '';
  child.stdout!.on('data', (d: Buffer) => (said += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (said += d.toString()));
  const url = await eventually(
    async () => /oz0 inbox: (http\S+)\/ /.exec(said)?.[1],
    30_000,
    `oz0 inbox to listen: ${said}`,
  );
  inbox = { url, child, said: () => said };
  browser = await launchBrowser((chromium as { path: string }).path);
  page = await browser.newPage();
  await page.setViewport({ width: 420, height: 900 });
}, 120_000);

afterAll(async () => {
  await browser?.close();
  inbox?.child.kill('SIGTERM');
  await node?.shutdown();
  await as?.stop();
});

const start = (tenant: string, text: string) => startProbeJob(temporal.client, config.temporal.taskQueue, tenant, text);
const waits = waitsForPerson;

/** Signs in as `login` through the provider's own sign-in and consent pages. */
async function signIn(login: string) {
  await signInToInbox(page, inbox.url, login);
}

withBrowser(
  'A8/A9: a person signs in, sees their tenant’s calls and none of another’s, approves one, denies one with a reason, and a third leaves the page when the CLI answers it',
  async () => {
    const [one, two, three] = [await start(acme, 'one'), await start(acme, 'two'), await start(acme, 'three')];
    const theirs = await start(beta, 'beta-secret-arguments');
    for (const h of [one, two, three, theirs]) await waits(h);
    await signIn('alice');
    await waitForText(page, ['signed in as alice@acme.test', one.workflowId, two.workflowId, three.workflowId]);
    const shown = await textOf(page);
    // Another tenant's call is nowhere on the page, not even its arguments.
    expect(shown).not.toContain(theirs.workflowId);
    expect(shown).not.toContain('beta-secret-arguments');
    // Newest first: in the order the jobs asked, latest at the top.
    const asked = await Promise.all(
      [one, two, three].map(async (h) => ({ id: h.workflowId, at: (await h.query(waitingCallsQuery))[0].askedAt })),
    );
    // As the page shows them, top to bottom, their times never go up (two asked in the same millisecond may come
    // either way).
    const onPage = [...asked].sort((a, b) => shown.indexOf(a.id) - shown.indexOf(b.id)).map((a) => a.at);
    expect(onPage).toEqual([...onPage].sort((a, b) => b.localeCompare(a)));
    // Its arguments, laid out to read.
    expect(shown).toContain('"text": "one"');
    await page.screenshot({ path: `${artifactsDir('inbox')}/waiting.png`, fullPage: true });

    // Approve the first.
    await Promise.all([
      page.waitForNavigation({ waitUntil: 'domcontentloaded' }),
      page.click(`button[aria-label="Approve probe.probe of ${one.workflowId}"]`),
    ]);
    await waitForText(page, [`Approved probe.probe of ${one.workflowId}.`]);
    const approved = callsOf((await one.result()) as JobTrace)[0];
    expect(approved.result.isError).toBe(false);
    expect(approved.question?.answer).toMatchObject({
      approved: true,
      by: 'alice@acme.test',
      identity: { issuer: as.issuer, subject: 'alice', email: 'alice@acme.test' },
    });

    // Deny the second, with a reason the model reads.
    const reasonField = await page.$(`li[data-key="${two.workflowId}/c1"] input[name=reason]`);
    await reasonField!.type('not on a Friday');
    await Promise.all([
      page.waitForNavigation({ waitUntil: 'domcontentloaded' }),
      page.click(`button[aria-label="Deny probe.probe of ${two.workflowId}"]`),
    ]);
    await waitForText(page, [`Denied probe.probe of ${two.workflowId}: not on a Friday.`]);
    const denied = callsOf((await two.result()) as JobTrace)[0];
    expect(denied.result.isError).toBe(true);
    expect(JSON.stringify(denied.result.content)).toContain('not on a Friday');
    expect(denied.question?.answer).toMatchObject({
      approved: false,
      by: 'alice@acme.test',
      reason: 'not on a Friday',
    });

    // The third is answered elsewhere (the CLI's way): it leaves the page without a reload.
    await waitForText(page, [three.workflowId]);
    await answerCall(temporal.client, three.workflowId, { approve: true, by: 'cli:ops' });
    await eventually(
      async () => (!(await textOf(page)).includes(three.workflowId) ? true : undefined),
      20_000,
      'the answered call to leave the page',
    );
    expect(await textOf(page)).toContain('Nothing waits for you.');
    await theirs.cancel();
  },
  180_000,
);

withBrowser(
  'A9/A12: a call of a tenant that does not name you is refused as one that does not wait, and a form without your CSRF token is refused',
  async () => {
    const theirs = await start(beta, 'not yours');
    const mine = await start(acme, 'mine');
    for (const h of [theirs, mine]) await waits(h);
    await page.goto(`${inbox.url}/`, { waitUntil: 'domcontentloaded' });
    if (!(await textOf(page)).includes('signed in as')) await signIn('alice');
    await waitForText(page, [mine.workflowId]);
    const csrf = await page.$eval('input[name=csrf]', (el) => (el as unknown as { value: string }).value);
    const post = (fields: Record<string, string>) =>
      page.evaluate(async (body) => {
        const res = await fetch('answer', { method: 'POST', body: new URLSearchParams(body), redirect: 'manual' });
        return { status: res.status, text: await res.text() };
      }, fields);
    // A12: refused as a call that does not wait is (below): the same redirect, the same sentence.
    const forbidden = await post({ csrf, job: theirs.workflowId, key: `${theirs.workflowId}/c1`, decision: 'approve' });
    expect(forbidden.status).toBe(0);
    await page.goto(`${inbox.url}/`, { waitUntil: 'domcontentloaded' });
    await waitForText(page, [`That call of ${theirs.workflowId} does not wait for you.`]);
    const forged = await post({
      csrf: 'forged',
      job: mine.workflowId,
      key: `${mine.workflowId}/c1`,
      decision: 'approve',
    });
    expect(forged.status).toBe(403);
    // Both calls still wait: nothing reached either job.
    expect((await theirs.query(waitingCallsQuery)).length).toBe(1);
    expect((await mine.query(waitingCallsQuery)).length).toBe(1);
    // The control: the same form with the session's token, for the person's own tenant, answers.
    const ok = await post({ csrf, job: mine.workflowId, key: `${mine.workflowId}/c1`, decision: 'deny', reason: 'no' });
    expect(ok.status).toBe(0);
    expect(callsOf((await mine.result()) as JobTrace)[0].question?.answer).toMatchObject({
      approved: false,
      by: 'alice@acme.test',
    });
    // Answering it again says who answered first.
    await post({ csrf, job: mine.workflowId, key: `${mine.workflowId}/c1`, decision: 'approve' });
    await page.goto(`${inbox.url}/`, { waitUntil: 'domcontentloaded' });
    await waitForText(page, [`probe.probe of ${mine.workflowId} was already denied by alice@acme.test at`]);
    // Another tenant's call that no longer waits: nothing of it is said, not even who answered it.
    await answerCall(temporal.client, theirs.workflowId, { approve: true, by: 'cli:beta-ops' });
    await theirs.result();
    await post({ csrf, job: theirs.workflowId, key: `${theirs.workflowId}/c1`, decision: 'approve' });
    await page.goto(`${inbox.url}/`, { waitUntil: 'domcontentloaded' });
    await waitForText(page, [`That call of ${theirs.workflowId} does not wait for you.`]);
    expect(await textOf(page)).not.toContain('beta-ops');
  },
  120_000,
);
