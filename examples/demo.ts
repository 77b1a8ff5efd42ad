/**
 * `npm run demo`: the embedded default (a Temporal dev server with a SQLite file and the Web UI, plus one
 * node), one job against the example servers — a plugin, a sandboxed and a remote one — then its trace and
 * where to watch it in the UI. A refund waits for a person's yes (A4): the demo prints the command a person would
 * type, then answers it itself. It exits 1, naming each step that went otherwise than it expects (./demo-plan), and 0
 * when every step did.
 *
 * `--keep` leaves it all running until Ctrl-C; `--config FILE` runs it on another config with the same servers and
 * harnesses (the repository's oz0.config.json by default); `--state DIR` keeps its state there (`.oz0/demo`);
 * `--port N` puts the dev server there (7233 when free; 0: any free port).
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import pino from 'pino';
import { parseArgs } from 'node:util';
import type { Client } from '@temporalio/client';
import { z } from 'zod';
import { answerCall } from '../client/calls';
import { connectJobClient, jobTrace, startJob } from '../client/jobs';
import type { JobClient, ShownTrace } from '../client/jobs';
import { readReceived } from './common';
import { contentDigest } from './pages';
import { formatTrace } from '../client/format';
import { approveListing, readListing } from '../client/approve';
import { changePolicy, policyTargetOf } from '../common/policy-client';
import { waitingCallsQuery } from '../model/messages';
import { callsOf } from '../model/job';
import { setPolicyUpdate } from '../model/messages';
import { ConfigError, loadConfig, parseConfig } from '../common/config';
import type { LoadedConfig } from '../common/config';
import { freePort, startDevServer } from '../worker/dev-server';
import { createLogger } from '../common/logger';
import { createNode } from '../worker/node';
import { projectRoot } from '../common/paths';
import { findTemporalCli } from '../worker/temporal-cli';
import { findPython } from '../worker/python';
import { startReaderServer } from './reader';
import { demoPlan, demoProblems, specOf, ticketsPlan } from './demo-plan';
import { INBOX_CLIENT, TICKETS_CLIENTS, startTicketsWorld } from './tickets-world';
import { oidcSignIn } from '../client/inbox/oidc';
import { startInbox } from '../client/inbox/server';

const OptionsSchema = z.strictObject({
  keep: z.boolean().default(false),
  config: z.string().min(1).optional(),
  state: z.string().min(1).optional(),
  port: z.coerce.number().int().min(0).max(65535).optional(),
});

class DemoUsageError extends Error {}

function options(argv: string[]): z.infer<typeof OptionsSchema> {
  let values: Record<string, unknown>;
  try {
    values = parseArgs({
      args: argv,
      options: {
        keep: { type: 'boolean' },
        config: { type: 'string' },
        state: { type: 'string' },
        port: { type: 'string' },
      },
    }).values;
  } catch (err) {
    throw new DemoUsageError((err as Error).message);
  }
  const parsed = OptionsSchema.safeParse(values);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new DemoUsageError(`--${issue.path.join('.')}: ${issue.message}`);
  }
  return parsed.data;
}

/** The servers and harnesses the demo's job uses: a config without one of them is refused before anything starts. */
function needed(config: LoadedConfig): void {
  for (const server of ['ledger', 'reader', 'notes', 'pages']) {
    if (!config.servers[server]) throw new ConfigError(`${config.source}: servers.${server}: the demo's job calls it`);
  }
  if (!config.harnesses.refunds) throw new ConfigError(`${config.source}: harnesses.refunds: the demo's job runs it`);
}

async function portOr(preferred: number): Promise<number> {
  const net = await import('node:net');
  const free = await new Promise<boolean>((resolve) => {
    const srv = net.createServer().once('error', () => resolve(false));
    srv.listen(preferred, '127.0.0.1', () => srv.close(() => resolve(true)));
  });
  return free ? preferred : freePort();
}

/**
 * A4/A5: answers each call of the job that waits for a person's yes, as a person would with `oz0 call approve`,
 * after printing that command; until `done` resolves.
 */
async function approveAsAsked(
  client: Client,
  jobId: string,
  say: (line: string) => void,
  done: Promise<unknown>,
  inbox: string,
): Promise<void> {
  let over = false;
  const stop = () => {
    over = true;
  };
  void done.then(stop, stop);
  const answered = new Set<string>();
  while (!over) {
    const waiting = await client.workflow
      .getHandle(jobId)
      .query(waitingCallsQuery)
      .catch(() => []);
    for (const call of waiting.filter((c) => !answered.has(c.key))) {
      answered.add(call.key);
      const where = call.session ? ` in session ${call.session}` : '';
      say(`${call.tool} ${call.args}${where} waits for a person's yes (policy ${call.pattern}: confirm)`);
      say(`  a person would type: ./bin/oz0 call approve ${jobId} ${call.activityId} --by <you>`);
      say(`  or answer it in the inbox: ${inbox}/ (sign in as ann, any password)`);
      const yes = await answerCall(client, jobId, { call: call.activityId, approve: true, by: 'the demo' });
      say(`  approved by ${yes.by} at ${yes.at}: ${call.key} runs now, once`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function main(): Promise<void> {
  const opts = options(process.argv.slice(2));
  const root = projectRoot();
  const state = path.resolve(opts.state ?? path.join(root, '.oz0', 'demo'));
  fs.mkdirSync(state, { recursive: true });
  const say = (line: string) => process.stderr.write(`demo: ${line}\n`);
  // The node's JSON log goes to a file, not between the demo's lines; a failure's own lines say why.
  const logFile = path.join(state, 'node.log');
  const logger = createLogger({
    level: process.env.OZ0_LOG_LEVEL ?? 'info',
    destination: pino.destination({ dest: logFile, sync: true, mkdir: true, append: false }),
  });
  // The repository's oz0.config.json, as `oz0 dev` reads it: its servers, with the grants the sandboxed one needs, and
  // its harnesses (I2); the demo keeps its state in a folder of its own and adds the remote server it runs.
  const base = loadConfig({ file: opts.config ?? path.join(root, 'oz0.config.json'), env: {} });
  needed(base);
  const shown = path.relative(process.cwd(), logFile);
  say(`the node's log: ${shown.startsWith('..') ? logFile : shown}`);

  // What the demo started, stopped in reverse order however it ends: nothing is left running after it.
  const started: Array<() => Promise<unknown>> = [];
  try {
    const problems = await runDemo({ root, state, base, port: opts.port, keep: opts.keep, say, logger, started });
    if (problems.length === 0) say('every step ended as the demo expects');
    for (const problem of problems) process.stderr.write(`demo failed: ${problem}\n`);
    if (problems.length) process.exitCode = 1;
    if (opts.keep) {
      say('running until Ctrl-C (--keep)');
      await new Promise<void>((resolve) => {
        process.once('SIGINT', () => resolve());
        process.once('SIGTERM', () => resolve());
      });
    }
  } finally {
    for (const stop of started.reverse()) await stop().catch((err: Error) => say(`could not stop: ${err.message}`));
  }
}

/** Starts the dev server, the remote server and the node, runs the job, prints its trace; what went otherwise. */
async function runDemo(ctx: {
  root: string;
  state: string;
  base: LoadedConfig;
  port: number | undefined;
  /** --keep: a refund is left waiting for a person to answer it in the inbox. */
  keep: boolean;
  say: (line: string) => void;
  logger: ReturnType<typeof createLogger>;
  started: Array<() => Promise<unknown>>;
}): Promise<string[]> {
  const { root, state, base, say, logger, started } = ctx;
  const cli = findTemporalCli({ log: say });
  const port = ctx.port === 0 ? await freePort() : await portOr(ctx.port ?? 7233);
  const uiPort = ctx.port === 0 ? await freePort() : await portOr(port + 1000);
  say(
    `starting the Temporal dev server (${cli ?? "@temporalio/testing's download"}) on 127.0.0.1:${port}, SQLite ${path.join(state, 'temporal.db')}`,
  );
  // A8-A9: the approvals inbox's port, chosen first: the UI decodes payloads through its codec server (D5).
  const inboxPort = ctx.port === 0 ? await freePort() : await portOr(8090);
  const server = await startDevServer({
    cli,
    port,
    uiPort,
    dbFile: path.join(state, 'temporal.db'),
    logFile: path.join(state, 'temporal-server.log'),
    uiCodec: `http://127.0.0.1:${inboxPort}`,
  });
  started.push(() => server.stop());
  const remote = await startReaderServer(0, { stateFile: path.join(state, 'remote-seen.json') });
  started.push(() => remote.close());
  // R1-R2: the ticket desk behind an authorization server of its own (oidc-provider), both on free ports; acme's and
  // beta's OAuth clients there, their secret and key in files the config names (file:…).
  // A8-A9: the approvals inbox, its people signed in by that same authorization server (ann, acme's approver).
  const inboxSecret = randomBytes(24).toString('hex');
  const tickets = await startTicketsWorld(path.join(state, 'tickets'), {
    inbox: { redirectUri: `http://127.0.0.1:${inboxPort}/callback`, secret: inboxSecret },
  });
  started.push(() => tickets.close());
  say(`the ticket desk ${tickets.url} takes tokens of its authorization server ${tickets.issuer} only`);
  const python = 'python' in findPython({ root, install: false, env: {} }) && Boolean(base.harnesses.refunds_py);
  if (!python && base.harnesses.refunds_py)
    say(
      'the Python agent (harness refunds_py) is left out: the project has no Python venv yet (npm run python:install makes it)',
    );
  const { baseDir, source, ...file } = base;
  const config = {
    ...parseConfig(
      {
        ...file,
        temporal: { address: server.address, namespace: 'default', taskQueue: 'oz0' },
        servers: {
          ...base.servers,
          ledger: { ...base.servers.ledger, env: { LEDGER_FILE: path.join(state, 'ledger.db') } },
          reader: { ...base.servers.reader, env: { READER_STATE: path.join(state, 'reader-seen.json') } },
          // D1: the pages server writes down what it answered, so the demo checks its screenshot arrived whole.
          pages: { ...base.servers.pages, env: { OZ0_RECEIVED_LOG: path.join(state, 'pages-answered.jsonl') } },
          search: { url: remote.url },
          tickets: { url: tickets.url, credentials: 'per-tenant' },
        },
        tenants: {
          ...base.tenants,
          acme: {
            ...base.tenants.acme,
            credentials: { tickets: tickets.credentials.acme },
            approvers: ['ann@acme.example'],
          },
          beta: { ...base.tenants.beta, credentials: { tickets: tickets.credentials.beta } },
        },
        // The Python agent runs on the project's venv (`npm run python:install`); without it, the demo leaves it out.
        harnesses: python ? base.harnesses : { refunds: base.harnesses.refunds },
        node: { ...base.node, stateDir: path.join(state, 'node') },
        inbox: { port: inboxPort, oidc: { issuer: tickets.issuer, clientId: INBOX_CLIENT } },
      },
      source,
    ),
    baseDir,
    source,
  };
  const node = await createNode({ config, logger });
  // Which bubblewrap isolates the sandboxed server and the agents, and from where (I6, I8): a new user's first question.
  for (const line of node.isolationLines) say(line.text);
  const running = node.run();
  started.push(async () => {
    await node.shutdown();
    await running;
  });
  const jc = await connectJobClient(config);
  started.push(() => jc.close());
  const inbox = await startInbox({
    config,
    client: jc.client,
    data: jc.data,
    signIn: await oidcSignIn(config.inbox!.oidc, inboxSecret),
    temporalUi: server.uiUrl,
  });
  started.push(() => inbox.close());
  say(`the approvals inbox: ${inbox.url}/ (sign in as ann, acme's approver, with any password)`);
  say(
    `payloads are sealed in Temporal with each tenant's key (D4); signed in to the inbox, ann reads acme's jobs decoded in the Temporal UI, and beta's stay sealed (D5)`,
  );
  // A remote server's calls need the tenant's approval of its listing (A2): the demo approves it as
  // `oz0 policy approve acme search --yes` would.
  const listing = await readListing(config, logger, 'search');
  await approveListing(policyTargetOf(config, jc.client), 'acme', listing);
  say(`approved the listing of search for acme (digest ${listing.digest.slice(0, 16)}…)`);
  // Each tenant reads the desk's listing with its own token, and approves what it saw.
  for (const tenant of ['acme', 'beta']) {
    const own = await readListing(config, logger, 'tickets', tenant);
    await approveListing(policyTargetOf(config, jc.client), tenant, own);
    say(`approved the listing of tickets for ${tenant}, read with ${tenant}'s own OAuth client`);
  }
  // A refund needs a person's yes (A4), as `oz0 policy set acme ledger.refund confirm` would say.
  await changePolicy(policyTargetOf(config, jc.client), 'acme', setPolicyUpdate, ['ledger.refund', 'confirm']);
  say("ledger.refund needs a person's yes for acme (policy: confirm)");

  const order = `o-${Date.now().toString(36)}`;
  const plan = demoPlan(order, python);
  // beta's job calls the same desk at once, on beta's own client: the desk keeps a desk per client.
  const betaPlan = ticketsPlan(order);
  const beta = await startJob(jc, specOf('beta', betaPlan));
  const handle = await startJob(jc, specOf('acme', plan));
  const link = `${server.uiUrl}/namespaces/default/workflows/${encodeURIComponent(handle.workflowId)}`;
  say(`job ${handle.workflowId} started; watch it in the Temporal UI: ${link}`);
  const result = handle.result();
  await approveAsAsked(jc.client, handle.workflowId, say, result, inbox.url);
  // A job that failed has a trace too: the check below says so, with its steps.
  await result.catch(() => undefined);
  const trace = await jobTrace(jc.client, handle.workflowId, { data: jc.data });
  process.stdout.write(`${formatTrace(trace)}\n\nWatch it in the Temporal UI: ${link}\n`);
  const screenshot = await screenshotProblems(jc, trace, path.join(state, 'pages-answered.jsonl'), say);
  await beta.result().catch(() => undefined);
  const betaTrace = await jobTrace(jc.client, beta.workflowId, { data: jc.data });
  process.stdout.write(`\nbeta's job ${beta.workflowId}:\n${formatTrace(betaTrace)}\n`);
  if (ctx.keep) {
    // A8: one more refund, left for a person: it waits until someone answers it in the inbox (or the CLI).
    const left = await startJob(jc, {
      tenant: 'acme',
      steps: [
        { call: 'ledger.charge', args: { order_id: `${order}-kept`, amount: 40 } },
        { call: 'ledger.refund', args: { order_id: `${order}-kept`, amount: 40 } },
      ],
    });
    say(`job ${left.workflowId}'s refund waits for you: answer it at ${inbox.url}/ (sign in as ann, any password)`);
  }
  return [
    ...demoProblems(plan, trace),
    ...screenshot,
    ...demoProblems(betaPlan, betaTrace).map((p) => `beta's job: ${p}`),
    ...identityProblems({ acme: trace, beta: betaTrace }),
  ];
}

/**
 * D1-D3: the screenshot reached the job whole — the SHA-256 of the PNG the job reads back from the store is the one the
 * pages server wrote down as it answered — while the job's own trace holds only its claim.
 */
async function screenshotProblems(
  jc: JobClient,
  trace: ShownTrace,
  answeredLog: string,
  say: (line: string) => void,
): Promise<string[]> {
  const step = callsOf(trace).find((s) => s.tool === 'pages.screenshot');
  if (!step?.result.stored) return [`pages.screenshot: its answer is not kept in the payload store`];
  const whole = await jc.data.answers.read(step.result, { jobId: trace.jobId, tenant: 'acme' });
  const sent = readReceived(answeredLog).find((e) => e.key === step.key)?.sha256;
  if (contentDigest(whole) !== sent)
    return [`pages.screenshot: the answer the job reads is not the one the server sent`];
  const png = whole.content.find((c) => (c as { type?: string }).type === 'image') as { data: string } | undefined;
  const bytes = Buffer.from(png?.data ?? '', 'base64').length;
  say(
    `pages.screenshot answered a ${(bytes / 1024 / 1024).toFixed(1)} MiB PNG: it reached the job whole (sha256 ` +
      `${sent.slice(0, 16)}…, as the server sent it); the job's history holds a claim in ${step.result.stored.driver}`,
  );
  return [];
}

/** R1, on the desk's side: each tenant's whoami answered with that tenant's own OAuth client, never the other's. */
function identityProblems(
  traces: Record<keyof typeof TICKETS_CLIENTS, Awaited<ReturnType<typeof jobTrace>>>,
): string[] {
  const problems: string[] = [];
  for (const [tenant, trace] of Object.entries(traces) as Array<[keyof typeof TICKETS_CLIENTS, typeof traces.acme]>) {
    const step = callsOf(trace).find((s) => s.tool === 'tickets.whoami');
    const who = (step?.result.structuredContent as { client?: string } | undefined)?.client;
    if (who !== TICKETS_CLIENTS[tenant])
      problems.push(
        `tickets.whoami of ${tenant}: the desk took it for ${who ?? 'nobody'}, not ${TICKETS_CLIENTS[tenant]}`,
      );
  }
  return problems;
}

main().catch((err) => {
  // A bad option or config is the user's to fix: said in a sentence; anything else with its stack.
  if (err instanceof ConfigError || err instanceof DemoUsageError) process.stderr.write(`demo: ${err.message}\n`);
  else createLogger().error(err);
  process.exit(1);
});
