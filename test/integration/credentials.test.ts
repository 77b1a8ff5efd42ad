/**
 * Remote servers on each tenant's own credentials (SPEC R1, R2, K1): a real authorization server (npm's
 * oidc-provider) and the example ticket desk, which takes only tokens issued for it and keeps one desk per OAuth
 * client. What each tenant's calls came with is read on the server's side.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import type { JobTrace } from '../../model/job';
import { callsOf } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { createNode } from '../../worker/node';
import { approve, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { oz0, pluginTestCli } from '../helpers/cli';
import { newClient, oauthCredential, startOAuthWorld } from '../helpers/oauth';
import type { OAuthWorld, TestClient } from '../helpers/oauth';

const temporal = useTemporal();
let world: OAuthWorld;
let acme: TestClient;
let beta: TestClient;
const received = path.join(tmpDir(), 'tickets.jsonl');

beforeAll(async () => {
  process.env.OZ0_RECEIVED_LOG = received;
  acme = await newClient('acme-oz0', 'client_secret_basic');
  beta = await newClient('beta-oz0', 'client_secret_post');
  world = await startOAuthWorld([acme, beta]);
  process.env.OZ0_TEST_ACME_SECRET = acme.secret;
});
afterAll(async () => {
  delete process.env.OZ0_TEST_ACME_SECRET;
  await world?.close();
});

/** A config with the ticket desk per tenant: acme's secret from the environment, beta's from a file. */
function config(extra: { protocol?: string; tenants?: Record<string, unknown>; url?: string } = {}) {
  return temporal.config({
    servers: {
      tickets: { url: extra.url ?? world.tickets.url, credentials: 'per-tenant', protocol: extra.protocol ?? 'auto' },
    },
    tenants: {
      acme: { credentials: { tickets: oauthCredential(acme, world.as.issuer, 'env:OZ0_TEST_ACME_SECRET') } },
      beta: {
        credentials: { tickets: oauthCredential(beta, world.as.issuer, world.secretFile('beta', beta.secret)) },
      },
      ...extra.tenants,
    },
  });
}

type Config = ReturnType<typeof config>;

/** Runs jobs on one node, at once; each tenant with credentials has approved the desk's listing (A2) first. */
async function runOn(cfg: Config, ...specs: JobSpec[]): Promise<JobTrace[]> {
  const node = await createNode({ config: cfg, logger });
  return node.runUntil(() => runJobs(cfg, ...specs));
}

async function runJobs(cfg: Config, ...specs: JobSpec[]): Promise<JobTrace[]> {
  for (const tenant of new Set(specs.map((s) => s.tenant))) {
    if (cfg.tenants[tenant]?.credentials.tickets) await approve(temporal, cfg, tenant, 'tickets');
  }
  const handles = await Promise.all(
    specs.map((spec) =>
      temporal.client.workflow.start('job', {
        taskQueue: cfg.temporal.taskQueue,
        workflowId: uniqueId('cred'),
        args: [spec],
      }),
    ),
  );
  return Promise.all(handles.map((h) => h.result() as Promise<JobTrace>));
}

const text = (trace: JobTrace, i: number) =>
  callsOf(trace)
    [i].result.content.map((c) => (c as { text?: string }).text)
    .join(' ');

const records = () => readReceived(received);

describe.each(['2026-07-28', '2025-11-25'])('on %s', (protocol) => {
  test("R1/R2: acme's calls come to the server with acme's token and beta's with beta's; each has its own desk", async () => {
    const cfg = config({ protocol });
    const [forAcme, forBeta] = await runOn(
      cfg,
      ...(['acme', 'beta'] as const).map((tenant) => ({
        tenant,
        steps: [
          { call: 'tickets.whoami', args: {} },
          { call: 'tickets.open_ticket', args: { title: `${tenant}'s ${protocol}` } },
          { call: 'tickets.list_tickets', args: {} },
        ],
      })),
    );
    expect(text(forAcme, 0)).toMatch(/^acme-oz0 /);
    expect(text(forBeta, 0)).toMatch(/^beta-oz0 /);
    expect(text(forAcme, 2)).toContain(`acme's ${protocol}`);
    expect(text(forAcme, 2)).not.toContain(`beta's ${protocol}`);
    expect(text(forBeta, 2)).toContain(`beta's ${protocol}`);
    for (const trace of [forAcme, forBeta]) expect(callsOf(trace).every((s) => s.protocol === protocol)).toBe(true);
    // On the server's side: each key came with the client of its own tenant.
    const calls = records().filter((r) => r.tool !== undefined);
    for (const [trace, client] of [
      [forAcme, acme.id],
      [forBeta, beta.id],
    ] as const) {
      for (const step of callsOf(trace)) {
        const seen = calls.filter((r) => r.key === step.key);
        expect(seen.length).toBeGreaterThan(0);
        expect(seen.every((r) => r.client === client)).toBe(true);
      }
    }
    // R2 step-up: the first token had the scope of the server's challenge (tickets.read); open_ticket asked for more
    // with a 403 before it ran, and was sent again with a token that has it, within its one attempt.
    const open = callsOf(forAcme)[1];
    expect(open.result.isError).toBe(false);
    expect(open.attempts).toEqual([
      { attempt: 1, outcome: 'ok', note: expect.stringContaining('HTTP 403 insufficient_scope') },
    ]);
    expect(calls.filter((r) => r.key === open.key && r.tool === 'open_ticket')).toHaveLength(1);
  });
});

test('R1: a tenant without credentials for a per-tenant server is refused before anything is sent', async () => {
  const cfg = config({ tenants: { gamma: { policy: { 'tickets.*': 'allow' } } } });
  const before = records().length;
  const [trace] = await runOn(cfg, { tenant: 'gamma', steps: [{ call: 'tickets.whoami', args: {} }] });
  const step = callsOf(trace)[0];
  expect(step.result.isError).toBe(true);
  expect(step.attempts).toEqual([
    {
      attempt: 1,
      outcome: 'refused',
      note: 'tenant gamma has no credentials for server "tickets" (tenants.gamma.credentials.tickets), which takes each tenant\'s own: nothing was sent',
    },
  ]);
  // The server saw nothing at all: no request, not even one without a token.
  expect(records().slice(before)).toEqual([]);
});

test('K1/R2: a 401 for a call the server refused before running it takes a new token in the same attempt; the call runs once', async () => {
  const cfg = config();
  const node = await createNode({ config: cfg, logger });
  const [first, second] = await node.runUntil(async () => {
    const [a] = await runJobs(cfg, {
      tenant: 'acme',
      steps: [{ call: 'tickets.open_ticket', args: { title: 'before' } }],
    });
    // The server revokes every token it has seen, for calls; the node still holds acme's, which has not expired.
    world.tickets.revokeSeenTokens('calls');
    const [b] = await runJobs(cfg, {
      tenant: 'acme',
      steps: [{ call: 'tickets.open_ticket', args: { title: 'after' } }],
    });
    return [a, b];
  });
  expect(callsOf(first)[0].result.isError).toBe(false);
  const step = callsOf(second)[0];
  expect(step.result.isError).toBe(false);
  expect(step.attempts).toEqual([
    {
      attempt: 1,
      outcome: 'ok',
      note: 'the server refused the request before running it (HTTP 401 invalid_token: the token was revoked): sent again with a new token',
    },
  ]);
  const forKey = records().filter((r) => r.key === step.key);
  // The server refused the request once (its token revoked), then ran it once, under its one key, with a new token.
  expect(forKey.filter((r) => r.event === 'refused')).toEqual([
    expect.objectContaining({ status: 401, method: 'tools/call' }),
  ]);
  const made = forKey.filter((r) => r.tool === 'open_ticket');
  expect(made).toEqual([expect.objectContaining({ client: acme.id, made: true })]);
  const firstJti = records().find((r) => r.key === callsOf(first)[0].key && r.tool === 'open_ticket')?.jti;
  expect(made[0].jti).not.toBe(firstJti);
});

test('R2: a token is taken again shortly before it expires, with no refusal from the server', async () => {
  const short = await newClient('short-oz0');
  const brief = await startOAuthWorld([short], { tokenSeconds: 3 });
  process.env.OZ0_TEST_SHORT_SECRET = short.secret;
  const before = records().length;
  try {
    const cfg = config({
      url: brief.tickets.url,
      tenants: {
        short: { credentials: { tickets: oauthCredential(short, brief.as.issuer, 'env:OZ0_TEST_SHORT_SECRET') } },
      },
    });
    const node = await createNode({ config: cfg, logger });
    const keys = await node.runUntil(async () => {
      const seen: string[] = [];
      for (let i = 0; i < 2; i++) {
        if (i) await new Promise((r) => setTimeout(r, 3200));
        const [trace] = await runJobs(cfg, { tenant: 'short', steps: [{ call: 'tickets.whoami', args: {} }] });
        expect(callsOf(trace)[0].result.isError).toBe(false);
        seen.push(callsOf(trace)[0].key);
      }
      return seen;
    });
    const byKey = keys.map((key) => records().find((r) => r.key === key && r.tool === 'whoami'));
    expect(byKey.every((r) => r?.client === short.id)).toBe(true);
    // A new token for the second call, taken before the first expired on the server: it refused nothing it was sent.
    expect(byKey[1]?.jti).not.toBe(byKey[0]?.jti);
    expect(
      records()
        .slice(before)
        .filter((r) => r.event === 'refused' && r.bearer === true),
    ).toEqual([]);
  } finally {
    delete process.env.OZ0_TEST_SHORT_SECRET;
    await brief.close();
  }
});

test("R1/R2: oz0 plugin test --tenant says which credential it used and what the server's metadata asked for", async () => {
  const dir = tmpDir('oz0-plugin-tenant-');
  const file = path.join(dir, 'oz0.config.json');
  const tenants = {
    acme: { credentials: { tickets: oauthCredential(acme, world.as.issuer, 'env:OZ0_TEST_ACME_SECRET') } },
    beta: { credentials: { tickets: oauthCredential(beta, world.as.issuer, world.secretFile('beta', beta.secret)) } },
  };
  fs.writeFileSync(
    file,
    JSON.stringify({ servers: { tickets: { url: world.tickets.url, credentials: 'per-tenant' } }, tenants }),
  );
  // A sample call of a function that needs more than the first token's scope: the report shows the step-up.
  const drillFile = path.join(dir, 'oz0.drill.json');
  fs.writeFileSync(
    drillFile,
    JSON.stringify({ samples: { open_ticket: { args: { title: 'from oz0 plugin test' } } } }),
  );
  const before = records().length;
  const { code, report } = await pluginTestCli(file, 'tickets', '--tenant', 'beta', '--drill-file', drillFile);
  expect(code).toBe(0);
  expect(report.tenant).toBe('beta');
  expect(report.credential).toEqual({
    tenant: 'beta',
    server: 'tickets',
    field: 'tenants.beta.credentials.tickets',
    headers: [],
    oauth: {
      clientId: beta.id,
      method: 'client_secret_post',
      issuer: world.as.issuer,
      seen: expect.objectContaining({
        resource: world.tickets.url,
        authorizationServers: [world.as.issuer],
        scopesSupported: ['tickets.read', 'tickets.write'],
        issuer: world.as.issuer,
        authMethods: expect.arrayContaining(['client_secret_post']),
        // The step-up of open_ticket: its 403 asked for both scopes, and the new token has them.
        scopeAsked: 'tickets.read tickets.write',
        scopeGranted: 'tickets.read tickets.write',
        challenge: expect.objectContaining({ status: 403, error: 'insufficient_scope' }),
      }),
    },
  });
  // On the server's side: the sample call came with beta's own client, and no secret or token was printed.
  const made = records()
    .slice(before)
    .filter((r) => r.tool === 'open_ticket');
  expect(made).toEqual([expect.objectContaining({ client: beta.id, made: true })]);
  const printed = JSON.stringify(report);
  for (const secret of [beta.secret, acme.secret, ...world.tickets.tokensSeen()]) expect(printed).not.toContain(secret);

  // A per-tenant server with no --tenant, or a tenant without credentials, is a usage error that says so.
  const without = await oz0(['plugin', 'test', 'tickets', '--config', file]);
  expect(without.code).toBe(2);
  expect(without.stderr).toContain('server "tickets" takes each tenant\'s own credentials: name one with --tenant');
  const gamma = await oz0(['plugin', 'test', 'tickets', '--config', file, '--tenant', 'gamma']);
  expect(gamma.code).toBe(2);
  expect(gamma.stderr).toContain('tenant gamma has no credentials for server "tickets"');
});
