/**
 * A10 (issue 46.3): a tenant's webhook is told when one of its calls starts waiting for a person and how the wait
 * ended — approved, denied, no answer in time — in JSON Slack's and Teams' incoming webhooks take (`text`), with a
 * link to the inbox and nothing secret: never the call's arguments, a reason someone typed, or the webhook's URL. A
 * webhook that fails is tried again with backoff, one that refuses for good is not, and neither holds the call up. A
 * receiver on 127.0.0.1 records what it got.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { answerCall } from '../../client/calls';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { setPolicyUpdate, waitingCallsQuery } from '../../model/messages';
import { createNode } from '../../worker/node';
import type { Oz0Node } from '../../worker/node';
import { eventually, fixture, logger, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

interface Received {
  path: string;
  body: { text: string; oz0: Record<string, unknown> };
}

/** A webhook receiver: what it got, per path; `/fail-N` answers 500 to its first N posts, `/gone` 404 to every one. */
async function receiver() {
  const got: Received[] = [];
  const tries = new Map<string, number>();
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const path = req.url ?? '/';
      const n = (tries.get(path) ?? 0) + 1;
      tries.set(path, n);
      const failing = /^\/fail-(\d+)/.exec(path);
      if (path.startsWith('/gone')) return res.writeHead(404).end();
      if (failing && n <= Number(failing[1])) return res.writeHead(500).end();
      got.push({ path, body: JSON.parse(body) as Received['body'] });
      res.writeHead(200).end('ok');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, got, tries, close: () => new Promise((r) => server.close(r)) };
}

let hook: Awaited<ReturnType<typeof receiver>>;
let node: Oz0Node;
const tenants = { acme: uniqueId('acme'), flaky: uniqueId('flaky'), gone: uniqueId('gone') };
let config: ReturnType<typeof temporal.config>;
const saved = { ...process.env };

beforeAll(async () => {
  hook = await receiver();
  process.env.OZ0_TEST_HOOK_ACME = `${hook.url}/acme`;
  process.env.OZ0_TEST_HOOK_FLAKY = `${hook.url}/fail-2`;
  process.env.OZ0_TEST_HOOK_GONE = `${hook.url}/gone`;
  config = temporal.config({
    servers: { probe: { command: 'node', args: [fixture('probe-server.js')] } },
    tools: { 'probe.huge_read': { confirmTimeoutSeconds: 2 } },
    tenants: {
      [tenants.acme]: { notify: { webhook: 'env:OZ0_TEST_HOOK_ACME' } },
      [tenants.flaky]: { notify: { webhook: 'env:OZ0_TEST_HOOK_FLAKY' } },
      [tenants.gone]: { notify: { webhook: 'env:OZ0_TEST_HOOK_GONE' } },
    },
    inbox: { publicUrl: 'https://inbox.example', oidc: { issuer: 'https://id.example', clientId: 'oz0' } },
  });
  node = await createNode({ config, logger });
  void node.run();
  for (const tenant of Object.values(tenants))
    await changePolicy(policyTargetOf(config, temporal.client), tenant, setPolicyUpdate, ['probe.*', 'confirm']);
}, 60_000);

afterAll(async () => {
  await node?.shutdown();
  await hook?.close();
  Object.assign(process.env, saved);
});

function start(tenant: string, tool: string, args: Record<string, unknown>) {
  return temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('job'),
    args: [{ tenant, steps: [{ call: tool, args }] }],
  });
}

const noticesOf = (jobId: string) => hook.got.filter((g) => g.body.oz0.jobId === jobId);

test('A10: the webhook hears that a call waits (with the inbox’s link) and who answered it, and nothing secret', async () => {
  const approved = await start(tenants.acme, 'probe.probe', { text: 'secret-argument-1' });
  const waiting = await eventually(async () => noticesOf(approved.workflowId)[0], 30_000, 'the waiting notice');
  expect(waiting.path).toBe('/acme');
  expect(waiting.body.text).toMatch(
    new RegExp(
      `^oz0: probe\\.probe \\(c1 of job ${approved.workflowId}, tenant ${tenants.acme}\\) waits for a person's yes until \\S+: answer it at https://inbox\\.example/$`,
    ),
  );
  expect(waiting.body.oz0).toMatchObject({ event: 'waiting', tenant: tenants.acme, tool: 'probe.probe', call: 'c1' });
  await answerCall(temporal.client, approved.workflowId, { approve: true, by: 'cli:ops' });
  await approved.result();
  const [, answered] = await eventually(async () => {
    const n = noticesOf(approved.workflowId);
    return n.length >= 2 ? n : undefined;
  });
  expect(answered.body.text).toBe(
    `oz0: probe.probe (c1 of job ${approved.workflowId}, tenant ${tenants.acme}) was approved by cli:ops`,
  );
  // A denial says who denied it, never the reason they typed.
  const denied = await start(tenants.acme, 'probe.probe', { text: 'secret-argument-2' });
  await eventually(async () => ((await denied.query(waitingCallsQuery)).length ? true : undefined));
  await answerCall(temporal.client, denied.workflowId, { approve: false, by: 'cli:ops', reason: 'secret-reason' });
  await denied.result();
  const last = await eventually(async () => noticesOf(denied.workflowId).find((g) => g.body.oz0.event === 'denied'));
  expect(last.body.text).toMatch(/was denied by cli:ops$/);
  // What the webhook got (its bodies): no argument, no reason, not the webhook's own URL.
  const everything = JSON.stringify(hook.got.map((g) => g.body));
  for (const secret of ['secret-argument', 'secret-reason', hook.url]) expect(everything).not.toContain(secret);
}, 90_000);

test('A10: no answer in time is said; a failing webhook is tried again, one that refuses for good is not, and neither holds the call up', async () => {
  const late = await start(tenants.acme, 'probe.huge_read', {});
  const trace = (await late.result()) as JobTrace;
  expect(callsOf(trace)[0].question?.ended).toBe('no answer within 2 s');
  const timedOut = await eventually(async () =>
    noticesOf(late.workflowId).find((g) => g.body.oz0.event === 'timed out'),
  );
  expect(timedOut.body.text).toMatch(/was refused: no answer within 2 s$/);

  // A webhook that answers 500 twice: the waiting notice still arrives, on its third try; the call waits as before.
  const flaky = await start(tenants.flaky, 'probe.probe', { text: 'x' });
  await eventually(async () => noticesOf(flaky.workflowId)[0], 60_000, 'the notice, after two failures');
  expect(hook.tries.get('/fail-2')).toBeGreaterThanOrEqual(3);
  await answerCall(temporal.client, flaky.workflowId, { approve: true, by: 'cli:ops' });
  expect(callsOf((await flaky.result()) as JobTrace)[0].result.isError).toBe(false);

  // A webhook that is gone (404): asked once per notice, never again; the call is answered and runs at once.
  const gone = await start(tenants.gone, 'probe.probe', { text: 'x' });
  await eventually(async () => ((await gone.query(waitingCallsQuery)).length ? true : undefined));
  await eventually(async () => (hook.tries.get('/gone') === 1 ? true : undefined));
  const answeredAt = Date.now();
  await answerCall(temporal.client, gone.workflowId, { approve: true, by: 'cli:ops' });
  expect(callsOf((await gone.result()) as JobTrace)[0].result.isError).toBe(false);
  expect(Date.now() - answeredAt).toBeLessThan(15_000);
  await new Promise((r) => setTimeout(r, 3000));
  expect(hook.tries.get('/gone')).toBe(2);
}, 120_000);
