/**
 * `npm run demo`: the embedded default (a Temporal dev server with a SQLite file and the Web UI, plus one
 * node), one job against the example servers — a plugin, a sandboxed and a remote one — then its trace and
 * where to watch it in the UI. A refund waits for a person's yes (A4): the demo prints the command a person would
 * type, then answers it itself. `--keep` leaves it all running until Ctrl-C.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Client } from '@temporalio/client';
import { answerCall } from '../client/calls';
import { connectJobClient, jobTrace, startJob } from '../client/jobs';
import { formatTrace } from '../client/format';
import { approveListing, readListing } from '../client/approve';
import { changePolicy, policyTargetOf } from '../common/policy-client';
import { waitingCallsQuery } from '../workflows/definitions';
import { setPolicyUpdate } from '../workflows/policy';
import { parseConfig } from '../common/config';
import { freePort, startDevServer } from '../worker/dev-server';
import { createLogger } from '../common/logger';
import { createNode } from '../worker/node';
import { projectRoot } from '../common/paths';
import { findTemporalCli } from '../worker/temporal-cli';
import { findPython } from '../worker/python';
import { startReaderServer } from './reader';
import type { JobSpec } from '../common/schemas';

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
      const yes = await answerCall(client, jobId, { call: call.activityId, approve: true, by: 'the demo' });
      say(`  approved by ${yes.by} at ${yes.at}: ${call.key} runs now, once`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function main(): Promise<void> {
  const keep = process.argv.includes('--keep');
  const root = projectRoot();
  const state = path.join(root, '.oz0', 'demo');
  fs.mkdirSync(state, { recursive: true });
  const say = (line: string) => process.stderr.write(`demo: ${line}\n`);
  const logger = createLogger({ level: process.env.OZ0_LOG_LEVEL ?? 'warn' });

  const cli = findTemporalCli({ log: say });
  const port = await portOr(7233);
  const uiPort = await portOr(port + 1000);
  say(
    `starting the Temporal dev server (${cli ?? "@temporalio/testing's download"}) on 127.0.0.1:${port}, SQLite ${path.join(state, 'temporal.db')}`,
  );
  const server = await startDevServer({
    cli,
    port,
    uiPort,
    dbFile: path.join(state, 'temporal.db'),
    logFile: path.join(state, 'temporal-server.log'),
  });
  const remote = await startReaderServer(0, { stateFile: path.join(state, 'remote-seen.json') });
  // The repository's oz0.config.json, as `oz0 dev` reads it: its servers, with the grants the sandboxed one needs, and
  // its harnesses (I2); the demo keeps its state in a folder of its own and adds the remote server it runs.
  const base = parseConfig(JSON.parse(fs.readFileSync(path.join(root, 'oz0.config.json'), 'utf8')));
  const python = 'python' in findPython({ root, install: false, env: {} });
  const config = {
    ...parseConfig({
      ...base,
      temporal: { address: server.address, namespace: 'default', taskQueue: 'oz0' },
      servers: {
        ...base.servers,
        ledger: { ...base.servers.ledger, env: { LEDGER_FILE: path.join(state, 'ledger.db') } },
        reader: { ...base.servers.reader, env: { READER_STATE: path.join(state, 'reader-seen.json') } },
        search: { url: remote.url },
      },
      // The Python agent runs on the project's venv (`npm run python:install`); without it, the demo leaves it out.
      harnesses: python ? base.harnesses : { refunds: base.harnesses.refunds },
      node: { ...base.node, stateDir: path.join(state, 'node') },
    }),
    baseDir: root,
    source: path.join(root, 'oz0.config.json'),
  };
  const node = await createNode({ config, logger });
  const running = node.run();
  const jc = await connectJobClient(config.temporal);
  // A remote server's calls need the tenant's approval of its listing (A2): the demo approves it as
  // `oz0 policy approve acme search --yes` would.
  const listing = await readListing(config, logger, 'search');
  await approveListing(policyTargetOf(config, jc.client), 'acme', listing);
  say(`approved the listing of search for acme (digest ${listing.digest.slice(0, 16)}…)`);
  // A refund needs a person's yes (A4), as `oz0 policy set acme ledger.refund confirm` would say.
  await changePolicy(policyTargetOf(config, jc.client), 'acme', setPolicyUpdate, ['ledger.refund', 'confirm']);
  say("ledger.refund needs a person's yes for acme (policy: confirm)");

  const order = `o-${Date.now().toString(36)}`;
  const spec: JobSpec = {
    tenant: 'acme',
    steps: [
      { call: 'ledger.charge', args: { order_id: order, amount: 500 } },
      // Waits for a person's yes (the demo gives it, below).
      { call: 'ledger.refund', args: { order_id: order, amount: 100 } },
      { call: 'reader.read_pages', args: { pages: 3, page_ms: 150 } },
      { call: 'notes.echo', args: { text: 'from a sandboxed server of this job' } },
      { call: 'search.echo', args: { text: 'from a remote server over Streamable HTTP' } },
      {
        session: [
          { call: 'ledger.set_status', args: { id: order, status: 'open' } },
          { call: 'ledger.set_status', args: { id: order, status: 'closed' } },
          { call: 'ledger.set_status', args: { id: order, status: 'open' } },
        ],
      },
      // The refunds agent finds 400 of the order not refunded yet, so it refunds it (its refund waits for a yes
      // too), and cancels its own slow check at 1 s; it runs in a sandbox of its own (I1), reaching only its gateway.
      { session: { harness: 'refunds', input: { order_id: order, deadline_ms: 1000 } } },
      // The same agent in Python, on the MCP Python SDK, when the project's venv is there: an order of its own to refund.
      ...(python
        ? [
            { call: 'ledger.charge', args: { order_id: `${order}-py`, amount: 300 } },
            { session: { harness: 'refunds_py', input: { order_id: `${order}-py`, deadline_ms: 1000 } } },
          ]
        : []),
      { call: 'ledger.charge', args: { order_id: order, amount: -1 } },
    ],
  };
  let failed = false;
  try {
    const handle = await startJob(jc, spec);
    const link = `${server.uiUrl}/namespaces/default/workflows/${encodeURIComponent(handle.workflowId)}`;
    say(`job ${handle.workflowId} started; watch it in the Temporal UI: ${link}`);
    const result = handle.result();
    await approveAsAsked(jc.client, handle.workflowId, say, result);
    await result;
    const trace = await jobTrace(jc.client, handle.workflowId);
    process.stdout.write(`${formatTrace(trace)}\n\nWatch it in the Temporal UI: ${link}\n`);
    failed = trace.status !== 'COMPLETED';
  } finally {
    await jc.close();
  }
  if (keep) {
    say('running until Ctrl-C (--keep)');
    await new Promise<void>((resolve) => {
      process.once('SIGINT', () => resolve());
      process.once('SIGTERM', () => resolve());
    });
  }
  await node.shutdown();
  await running;
  await remote.close();
  await server.stop();
  if (failed) process.exitCode = 1;
}

main().catch((err) => {
  createLogger().error(err);
  process.exit(1);
});
