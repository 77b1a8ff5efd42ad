/**
 * SPEC R3: no token or secret of a tenant's credentials reaches Temporal, a log line, a span, a metric label, a
 * sandbox or a harness. A node (`oz0 worker`, a process of its own, tracing over OTLP and serving /metrics) runs two
 * tenants' jobs against the ticket desk — acme with a client secret and a header secret from its environment, beta
 * with a private key (`private_key_jwt`) in a file — beside a sandboxed server and a harness that calls the desk
 * through its gateway. Then every place is searched for each secret and each token the desk was sent: none is found.
 * Beside each search, a positive control: what the test put there on purpose is found, so the search can fail.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { execFileSync } from 'node:child_process';
import { findTemporalCli } from '../../worker/temporal-cli';
import { payloadsIn } from '../helpers/history';
import { callsOf, isSessionTrace } from '../../model/job';
import { startWorker } from '../../worker/processes';
import type { JobTrace } from '../../model/job';
import { freePort } from '../../worker/dev-server';
import { eventually, example, killTree, testKeys, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { startOtlpReceiver } from '../helpers/otlp';
import { oz0 } from '../helpers/cli';
import type { OtlpReceiver } from '../helpers/otlp';
import { NODE_PROGRAM, ROOT, hostProcesses, probeHarness } from '../helpers/sandbox';
import { newClient, newSecret, oauthCredential, startOAuthWorld } from '../helpers/oauth';
import type { OAuthWorld, TestClient } from '../helpers/oauth';

const temporal = useTemporal();
let world: OAuthWorld;
let receiver: OtlpReceiver;
let acme: TestClient;
let beta: TestClient;
const workers: ChildProcess[] = [];

beforeAll(async () => {
  acme = await newClient('acme-oz0', 'client_secret_basic');
  beta = await newClient('beta-oz0', 'private_key_jwt');
  [world, receiver] = await Promise.all([startOAuthWorld([acme, beta]), startOtlpReceiver()]);
});
afterAll(async () => {
  for (const w of workers) if (w.pid) killTree(w.pid);
  await receiver?.close();
  await world?.close();
});

/**
 * Every workflow's history exported as JSON by the Temporal CLI (`temporal workflow show -o json`, what the UI's
 * download holds), its payloads decoded, and each one's description (memo, search attributes, pending activities and
 * their heartbeats).
 */
async function temporalText(): Promise<string> {
  const cli = findTemporalCli({ install: false })!;
  const address = ['--address', temporal.server.address, '--namespace', temporal.server.namespace];
  const parts: string[] = [];
  for await (const run of temporal.client.workflow.list()) {
    const ids = ['--workflow-id', run.workflowId, '--run-id', run.runId];
    for (const command of ['show', 'describe']) {
      const json = execFileSync(cli, ['workflow', command, ...ids, ...address, '--output', 'json'], {
        encoding: 'utf8',
        maxBuffer: 64 * 2 ** 20,
      });
      parts.push(json, ...payloadsIn(JSON.parse(json)).map((p) => p.text));
    }
  }
  return parts.join('\n');
}

/** Every object of a folder store, as text (each is a Payload, protobuf: its JSON data is readable inside). */
function storeText(folder: string): string {
  if (!fs.existsSync(folder)) return '';
  return fs
    .readdirSync(folder, { recursive: true, withFileTypes: true })
    .filter((e) => e.isFile())
    .map((e) => fs.readFileSync(path.join(e.parentPath, e.name), 'latin1'))
    .join('\n');
}

test('R3: no secret or token of a tenant reaches Temporal, the logs, spans, metrics, a sandbox or a harness', async () => {
  const dir = tmpDir();
  const acmeTenant = uniqueId('acme');
  const betaTenant = uniqueId('beta');
  const deskKey = newSecret('desk-key');
  const planted = newSecret('planted-on-purpose');
  const metricsPort = await freePort();
  // The config is a file in a folder of its own: the program's files are granted by their absolute paths.
  const grants = { read: NODE_PROGRAM.map((p) => path.join(ROOT, p)) };
  const servers = {
    tickets: { url: world.tickets.url, credentials: 'per-tenant' },
    notes: {
      command: 'node',
      args: [example('reader')],
      sandbox: grants,
      env: { PLANTED: 'env:OZ0_TEST_PLANTED', READER_STATE: 'seen.json' },
    },
  };
  const tenants = {
    [acmeTenant]: {
      policy: { 'tickets.*': 'allow' },
      credentials: {
        tickets: {
          ...oauthCredential(acme, world.as.issuer, 'env:OZ0_TEST_ACME_SECRET'),
          headers: { 'X-Desk-Key': 'env:OZ0_TEST_DESK_KEY' },
        },
      },
    },
    [betaTenant]: {
      policy: { 'tickets.*': 'allow' },
      credentials: { tickets: oauthCredential(beta, world.as.issuer, world.secretFile('beta.pem', beta.secret)) },
    },
  };
  const harness = probeHarness(['tickets.*'], grants);
  const harnesses = { caller: { ...harness, env: { ...harness.env, PLANTED: planted } } };
  const node = { heartbeatTimeoutSeconds: 10, stateDir: path.join(dir, 'state') };
  // New payloads plain (the file's keys still open the client's sealed spec): a secret that reached Temporal or the
  // store must show in what is searched below, not hide under a seal (D4 seals every payload; R3 is about the rest).
  const payloads = { seal: { folder: testKeys(), newPayloads: 'plain' } };
  const config = temporal.config({ servers, tenants, harnesses, node, payloads });
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(file, JSON.stringify({ temporal: config.temporal, servers, tenants, harnesses, node, payloads }));
  const logFile = path.join(dir, 'node.log');
  await startWorker(file, 'r3', workers, {
    logFile,
    env: {
      OZ0_TEST_ACME_SECRET: acme.secret,
      OZ0_TEST_DESK_KEY: deskKey,
      OZ0_TEST_PLANTED: planted,
      OZ0_METRICS_PORT: String(metricsPort),
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint,
      OTEL_BSP_SCHEDULE_DELAY: '100',
    },
  });
  // `oz0 policy approve` reads the listing with each tenant's own credentials, as a person runs it (A2, R1).
  let cli = '';
  for (const tenant of [acmeTenant, betaTenant]) {
    const out = await oz0(['policy', 'approve', tenant, 'tickets', '--yes', '--config', file], {
      OZ0_TEST_ACME_SECRET: acme.secret,
      OZ0_TEST_DESK_KEY: deskKey,
    });
    expect(out).toEqual(expect.objectContaining({ code: 0 }));
    cli += out.stdout + out.stderr;
  }

  const start = (tenant: string, steps: unknown[]) =>
    temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('r3'),
      args: [{ tenant, steps }],
    });
  const forAcme = await start(acmeTenant, [
    { call: 'tickets.whoami', args: {} },
    { call: 'notes.sleep', args: { ms: 4000, planted } },
    { session: { harness: 'caller', input: { steps: [{ call: 'tickets.whoami', args: {} }, { env: true }] } } },
  ]);
  const forBeta = await start(betaTenant, [
    { call: 'tickets.whoami', args: {} },
    { call: 'tickets.open_ticket', args: { title: 'beta signs with its key' } },
  ]);
  // The sandboxed server's environment, as the node's host sees it, while it runs: ours is the one with `planted`.
  const sandboxEnv = await eventually(
    () => {
      for (const p of hostProcesses('examples/reader.js')) {
        try {
          const environ = fs.readFileSync(`/proc/${p.pid}/environ`, 'utf8');
          if (environ.includes(planted)) return environ;
        } catch {
          // gone meanwhile
        }
      }
      return undefined;
    },
    30_000,
    "the sandboxed server's environment",
  );
  const [acmeTrace, betaTrace] = (await Promise.all([forAcme.result(), forBeta.result()])) as JobTrace[];
  expect(callsOf(acmeTrace).map((s) => [s.tool, s.result.isError])).toEqual([
    ['tickets.whoami', false],
    ['notes.sleep', false],
    ['tickets.whoami', false],
  ]);
  expect(callsOf(betaTrace).map((s) => s.result.isError)).toEqual([false, false]);
  expect(JSON.stringify(callsOf(betaTrace)[0].result)).toContain(beta.id);
  // The harness reached the desk through its gateway, as acme: the node added acme's credential, not the harness.
  const session = acmeTrace.steps.filter(isSessionTrace)[0];
  const harnessSaw = session.result?.structuredContent as {
    calls: Array<{ text?: string }>;
    envValues: Record<string, string>;
  };
  expect(JSON.stringify(harnessSaw.calls)).toContain(acme.id);
  const harnessEnv = JSON.stringify(harnessSaw.envValues);

  const metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
  await eventually(() => (receiver.spans.some((s) => s.attributes['oz0.tenant'] === betaTenant) ? true : undefined));
  const places: Record<string, string> = {
    temporal: await temporalText(),
    // D2: payloads past the threshold, and answers its calls keep, lie in the store: Temporal's too.
    'payload store': storeText(path.join(dir, 'state', 'payloads')),
    'node log': fs.readFileSync(logFile, 'utf8'),
    'oz0 policy approve': cli,
    spans: JSON.stringify(receiver.spans),
    metrics,
    'sandbox environment': sandboxEnv,
    'harness environment': harnessEnv,
  };
  const foundIn = (needle: string) => Object.keys(places).filter((place) => places[place].includes(needle));

  // Positive controls: what was put in a place on purpose is found there.
  expect(foundIn(planted).sort()).toEqual(['harness environment', 'sandbox environment', 'temporal']);
  for (const tenant of [acmeTenant, betaTenant]) {
    expect(foundIn(tenant)).toEqual(expect.arrayContaining(['temporal', 'node log', 'spans', 'metrics']));
  }

  const tokens = world.tickets.tokensSeen();
  expect(tokens.length).toBeGreaterThanOrEqual(2);
  // A private key is searched for by each of its lines of base64, so a key printed whole or in part is found.
  const keyLines = beta.secret.split('\n').filter((l) => l.length > 20 && !l.startsWith('-----'));
  const secrets: Record<string, string> = {
    "acme's client secret": acme.secret,
    "acme's header secret": deskKey,
    ...Object.fromEntries(keyLines.map((line, i) => [`beta's private key, line ${i + 1}`, line])),
    ...Object.fromEntries(tokens.map((t, i) => [`token ${i + 1}`, t])),
    ...Object.fromEntries(tokens.map((t, i) => [`token ${i + 1}'s signature`, t.split('.')[2]])),
  };
  const leaks = Object.entries(secrets)
    .map(([what, value]) => ({ what, places: foundIn(value) }))
    .filter((l) => l.places.length > 0);
  expect(leaks).toEqual([]);
});
