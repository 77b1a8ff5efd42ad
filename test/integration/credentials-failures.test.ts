/**
 * SPEC R4: each failure of a tenant's authorization ends its attempt with an outcome and a note that say which —
 * against the real authorization server (stopped, or told of clients that do not match) and a hostile one that
 * answers garbage — and nothing of the call reaches the ticket desk. An authorization server that is down is busy
 * (SPEC B): the call is tried again, and goes through once it is back.
 */
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { startTicketsServer } from '../../examples/tickets';
import type { JobTrace } from '../../model/job';
import { callsOf } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { createNode } from '../../worker/node';
import { approve, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { newClient, newSecret, oauthCredential, startBrokenAuthServer, startOAuthWorld } from '../helpers/oauth';
import type { OAuthWorld, TestClient } from '../helpers/oauth';

const temporal = useTemporal();
let world: OAuthWorld;
let acme: TestClient;
let stray: TestClient;
const received = path.join(tmpDir(), 'tickets.jsonl');
/** Where tokens of the stray client go instead of the ticket desk: a resource that is not the desk. */
const ELSEWHERE = 'http://127.0.0.1:9/elsewhere/mcp';

beforeAll(async () => {
  process.env.OZ0_RECEIVED_LOG = received;
  acme = await newClient('acme-oz0');
  stray = { ...(await newClient('stray-oz0')), audience: ELSEWHERE };
  world = await startOAuthWorld([acme, stray]);
  process.env.OZ0_TEST_ACME_SECRET = acme.secret;
});
afterAll(async () => {
  delete process.env.OZ0_TEST_ACME_SECRET;
  await world?.close();
});

/**
 * A config in which `tenant` reaches the desk at `url` with this OAuth client and secret: written to a file of its own,
 * or, for acme's own secret, taken from the environment (a file is read at each token request: one written later for
 * the same tenant and client would be the one used).
 */
function config(
  tenant: string,
  client: { id: string },
  secret: string,
  issuer = world.as.issuer,
  url = world.tickets.url,
) {
  const ref =
    client.id === acme.id && secret === acme.secret
      ? 'env:OZ0_TEST_ACME_SECRET'
      : world.secretFile(`${tenant}-${client.id}`, secret);
  return temporal.config({
    servers: { tickets: { url, credentials: 'per-tenant' } },
    tools: { '*': { maxAttempts: 6 } },
    tenants: {
      [tenant]: {
        // A1: the desk's listing is approved by readListing with a working client; the policy lets its calls run.
        policy: { 'tickets.*': 'allow' },
        credentials: {
          tickets: oauthCredential({ ...acme, id: client.id }, issuer, ref),
        },
      },
    },
  });
}

/**
 * Runs one job on a fresh node, the desk's listing approved for its tenant first (A2: read with acme's working
 * credentials; the policy workflow needs a node); `during` runs while it does (e.g. starting the authorization server
 * again).
 */
async function run(
  cfg: ReturnType<typeof config>,
  spec: JobSpec,
  opts: { approve?: boolean; before?: () => unknown; during?: () => Promise<void> } = {},
): Promise<JobTrace> {
  const node = await createNode({ config: cfg, logger });
  return node.runUntil(async () => {
    if (opts.approve !== false) await approve(temporal, config(spec.tenant, acme, acme.secret), spec.tenant, 'tickets');
    await opts.before?.();
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: cfg.temporal.taskQueue,
      workflowId: uniqueId('r4'),
      args: [spec],
    });
    await opts.during?.();
    return handle.result() as Promise<JobTrace>;
  });
}

/** What the desk ran (any tool) since `from`: R4's failures must leave this empty. */
const ranSince = (from: number) =>
  readReceived(received)
    .slice(from)
    .filter((r) => r.tool !== undefined);

test('R4: a wrong secret ends the attempt as failed, saying the authorization server refused the client; nothing reaches the server', async () => {
  const tenant = uniqueId('wrong');
  const from = readReceived(received).length;
  const trace = await run(config(tenant, acme, newSecret('wrong')), {
    tenant,
    steps: [{ call: 'tickets.whoami', args: {} }],
  });
  const step = callsOf(trace)[0];
  expect(step.result.isError).toBe(true);
  expect(step.attempts).toEqual([
    {
      attempt: 1,
      outcome: 'failed',
      note: `authorization of ${tenant} at tickets (client acme-oz0) failed: the authorization server refused the token request: invalid_client (client authentication failed): a wrong secret or key, or a client the authorization server does not know (tenants.${tenant}.credentials.tickets.oauth); nothing was sent`,
    },
  ]);
  expect(ranSince(from)).toEqual([]);
});

test('R4: an unknown client says so the same way, naming the client', async () => {
  const tenant = uniqueId('unknown');
  const from = readReceived(received).length;
  const trace = await run(config(tenant, { id: 'nobody-oz0' }, newSecret('nobody')), {
    tenant,
    steps: [{ call: 'tickets.whoami', args: {} }],
  });
  const [attempt] = callsOf(trace)[0].attempts;
  expect(attempt.outcome).toBe('failed');
  expect(attempt.note).toContain(
    '(client nobody-oz0) failed: the authorization server refused the token request: invalid_client',
  );
  expect(callsOf(trace)[0].attempts).toHaveLength(1);
  expect(ranSince(from)).toEqual([]);
});

test('R4/B: an authorization server that is down makes the call busy; it is tried again and goes through once it is back', async () => {
  const tenant = uniqueId('down');
  let restarted = false;
  const trace = await run(
    config(tenant, acme, acme.secret),
    // A write with one attempt would not be retried on a busy server (B2); nothing was sent here, so it is.
    { tenant, steps: [{ call: 'tickets.open_ticket', args: { title: 'while the authorization server was down' } }] },
    {
      before: () => world.as.stop(),
      during: async () => {
        await new Promise((r) => setTimeout(r, 1500));
        await world.restartAuthServer();
        restarted = true;
      },
    },
  );
  expect(restarted).toBe(true);
  const step = callsOf(trace)[0];
  expect(step.result.isError).toBe(false);
  const attempts = step.attempts;
  expect(attempts.at(-1)?.outcome).toBe('ok');
  expect(attempts.length).toBeGreaterThan(1);
  for (const busy of attempts.slice(0, -1)) {
    expect(busy.outcome).toBe('busy');
    expect(busy.note).toMatch(
      new RegExp(
        `^authorization of ${tenant} at tickets \\(client acme-oz0\\) is busy: the authorization server at http://127\\.0\\.0\\.1:\\d+ was not reachable \\(ECONNREFUSED\\); nothing was sent; tried again after the retry policy’s backoff$`,
      ),
    );
  }
  // The call ran once, with acme's token.
  const ran = readReceived(received).filter((r) => r.key === step.key && r.tool === 'open_ticket');
  expect(ran).toEqual([expect.objectContaining({ client: acme.id, made: true })]);
});

test('R4/B3: an authorization server still down at the last attempt ends the call with its error, the wait in words', async () => {
  const tenant = uniqueId('gone');
  try {
    const cfg = config(tenant, acme, acme.secret);
    cfg.tools['*'] = { maxAttempts: 2 };
    const spec = { tenant, steps: [{ call: 'tickets.whoami', args: {} }] };
    const trace = await run(cfg, spec, { before: () => world.as.stop() });
    const step = callsOf(trace)[0];
    expect(step.attempts.map((a) => a.outcome)).toEqual(['busy', 'busy']);
    expect(step.attempts[1].note).toMatch(
      /was not reachable \(ECONNREFUSED\); nothing was sent; not tried again: that was the last attempt$/,
    );
    expect(step.result.isError).toBe(true);
    expect(JSON.stringify(step.result.content)).toContain('oz0 did not try again (that was the last attempt)');
  } finally {
    await world.restartAuthServer();
  }
});

test.each(['html', 'no-token'] as const)(
  'R4: an authorization server that answers garbage (%s) fails the attempt, saying so and never echoing it',
  async (mode) => {
    const broken = await startBrokenAuthServer(mode);
    const desk = await startTicketsServer(0, { issuer: broken.issuer });
    try {
      const tenant = uniqueId('garbage');
      const cfg = config(tenant, acme, acme.secret, broken.issuer, desk.url);
      cfg.tenants[tenant].policy = { 'tickets.*': 'allow' };
      const from = readReceived(received).length;
      const trace = await run(cfg, { tenant, steps: [{ call: 'tickets.whoami', args: {} }] }, { approve: false });
      const step = callsOf(trace)[0];
      expect(step.attempts).toEqual([
        {
          attempt: 1,
          outcome: 'failed',
          note: `authorization of ${tenant} at tickets (client acme-oz0) failed: the authorization server at ${broken.issuer} answered the token request with no token; nothing was sent`,
        },
      ]);
      expect(JSON.stringify(trace)).not.toContain('portal');
      expect(ranSince(from)).toEqual([]);
    } finally {
      await desk.close();
      await broken.close();
    }
  },
);

test('R4: a token for another resource is refused by the node and never sent to the server', async () => {
  const tenant = uniqueId('stray');
  const seenBefore = new Set(world.tickets.tokensSeen());
  const from = readReceived(received).length;
  const trace = await run(config(tenant, stray, stray.secret), {
    tenant,
    steps: [{ call: 'tickets.whoami', args: {} }],
  });
  const [attempt] = callsOf(trace)[0].attempts;
  expect(attempt).toEqual({
    attempt: 1,
    outcome: 'failed',
    note: `authorization of ${tenant} at tickets (client stray-oz0) failed: the authorization server issued a token for ${ELSEWHERE}, not for ${world.tickets.url} (RFC 8707): it was not sent; nothing was sent`,
  });
  // On the server's side: no token of that audience ever came.
  const audiences = world.tickets
    .tokensSeen()
    .filter((t) => !seenBefore.has(t))
    .map((t) => JSON.parse(Buffer.from(t.split('.')[1], 'base64url').toString()).aud);
  expect(audiences).not.toContain(ELSEWHERE);
  expect(ranSince(from)).toEqual([]);
});

test('R4: a server that keeps answering 401 fails the attempt after one new token, saying what the server said', async () => {
  const tenant = uniqueId('refused');
  const from = readReceived(received).length;
  try {
    const trace = await run(
      config(tenant, acme, acme.secret),
      { tenant, steps: [{ call: 'tickets.whoami', args: {} }] },
      { before: () => world.tickets.refuseTokens('this desk takes no tokens today') },
    );
    expect(callsOf(trace)[0].attempts).toEqual([
      {
        attempt: 1,
        outcome: 'failed',
        note: `authorization of ${tenant} at tickets (client acme-oz0) failed: the server refused a fresh token too (HTTP 401 invalid_token: this desk takes no tokens today); nothing was sent`,
      },
    ]);
  } finally {
    world.tickets.refuseTokens(undefined);
  }
  // Refused, each time before anything ran: the first request without a token, then with one, then a fresh one.
  const since = readReceived(received).slice(from);
  expect(since.filter((r) => r.tool !== undefined)).toEqual([]);
  expect(since.filter((r) => r.event === 'refused' && r.bearer === true).length).toBeGreaterThanOrEqual(1);
});
