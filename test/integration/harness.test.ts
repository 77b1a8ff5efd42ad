/**
 * Live harness sessions (SPEC H1-H7, H10) on a real Temporal dev server, a real node and its gateway, and real MCP
 * servers over stdio and Streamable HTTP. The harness is test/fixtures/harness.js, which speaks only MCP and does
 * what its input says; what the servers received is read from their own logs.
 */
import { execFile } from 'node:child_process';
import { Writable } from 'node:stream';
import fs from 'node:fs';
import { LOGGED_STDERR_BYTES } from '../../common/last-words';
import path from 'node:path';
import { WorkflowFailedError } from '@temporalio/client';
import { readReceived, serveHttp } from '../../examples/common';
import type { HttpHandle } from '../../examples/common';
import { createReader } from '../../examples/reader';
import { startJob, jobStatus } from '../../client/jobs';
import { formatTrace } from '../../client/format';
import { watchJob } from '../../client/watch';
import type { WatchSnapshot } from '../../client/watch';
import { changePolicy, policyTargetOf } from '../../common/policy-client';
import { JobSpecError } from '../../model/schemas';
import type { JobSpec } from '../../model/schemas';
import { createNode } from '../../worker/node';
import { argsDigest } from '../../model/keys';
import { MODEL_NAME_PATTERN, modelToolName } from '../../model/model-names';
import { freePort } from '../../worker/dev-server';
import { killUpdate } from '../../model/messages';
import { isSessionTrace } from '../../model/job';
import type { JobTrace, SessionTrace } from '../../model/job';
import {
  ROOT,
  approve,
  eventually,
  example,
  fixture,
  logger,
  testKeys,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import { hostProcesses, sandboxed, writableDir } from '../helpers/sandbox';
import { logFileOf } from '../logs';
import { python, withPython } from '../helpers/python';

const temporal = useTemporal();
let remote: HttpHandle;
const dir = tmpDir();
const received = path.join(dir, 'received.jsonl');
/** What the names server (test/fixtures/names-server.js) received. */
const namesReceived = path.join(dir, 'names.jsonl');
const boxReceived = path.join(writableDir(), 'box-received.jsonl');
const harnessLogs = writableDir();

beforeAll(async () => {
  process.env.OZ0_RECEIVED_LOG = received;
  remote = await serveHttp(createReader({ stateFile: path.join(dir, 'remote-seen.json') }), 0);
});
afterAll(async () => {
  delete process.env.OZ0_RECEIVED_LOG;
  await remote?.close();
});

/** What the servers received, the plugins' log and the sandboxed server's together, in time order. */
function allReceived(): Array<Record<string, unknown>> {
  return [...readReceived(received), ...readReceived(boxReceived)].sort((a, b) => (a.t as number) - (b.t as number));
}

/** Servers of every kind, and harnesses: the probe (test/fixtures/harness.js) and the refunds agent. */
function harnessConfig(extra: { jobs?: object; harnessTimeout?: number } = {}) {
  const env = { OZ0_RECEIVED_LOG: received, LEDGER_FILE: path.join(tmpDir(), 'ledger.jsonl') };
  // I2: a sandbox has its own log (a plugin's files are never in its view) and the harnesses' logs may be written.
  const testFiles = { read: [fixture('harness.js')], write: [harnessLogs] };
  /** The probe harness, with tool patterns of its own. */
  const probeOf = (tools: string[]) => ({
    command: 'node',
    args: [fixture('harness.js')],
    env: { NODE_PATH: path.join(ROOT, 'node_modules') },
    tools,
    timeoutSeconds: 120,
    sandbox: sandboxed(testFiles),
  });
  const config = temporal.config({
    servers: {
      ledger: { command: 'node', args: [example('ledger')], env },
      reader: { command: 'node', args: [example('reader')], env },
      box: {
        command: 'node',
        args: [example('reader')],
        sandbox: sandboxed({ write: [path.dirname(boxReceived)] }),
        env: { OZ0_RECEIVED_LOG: boxReceived },
      },
      web: { url: remote.url },
      ev: { command: 'node', args: [fixture('everything.mjs')] },
      names: { command: 'node', args: [fixture('names-server.js')], env: { NAMES_LOG: namesReceived } },
    },
    tools: { '*': { timeoutSeconds: 60, maxAttempts: 3 } },
    harnesses: {
      probe: {
        command: 'node',
        args: [fixture('harness.js')],
        env: { HARNESS_MARK: 'x', NODE_PATH: path.join(ROOT, 'node_modules') },
        tools: ['ledger.*', 'reader.*', 'box.*', 'web.*'],
        timeoutSeconds: extra.harnessTimeout ?? 120,
        sandbox: sandboxed(testFiles),
      },
      // H3: the probe on a server whose functions' names a model API refuses as they are.
      namer: probeOf(['names.*']),
      refunds: {
        command: 'node',
        args: [path.join(ROOT, 'dist', 'examples', 'agents', 'refunds.js')],
        tools: ['ledger.*', 'reader.echo', 'reader.sleep'],
        timeoutSeconds: 120,
        sandbox: sandboxed(),
      },
      tasks: probeOf(['ev.simulate-research-query']),
      // The same agent in Python, on the MCP Python SDK's client, run by the project's venv (test/global-setup.ts).
      ...(python && {
        refunds_py: {
          command: python,
          args: [path.join(ROOT, 'examples', 'agents', 'refunds.py')],
          tools: ['ledger.*', 'reader.echo', 'reader.sleep'],
          timeoutSeconds: 120,
        },
      }),
    },
    ...(extra.jobs ? { jobs: extra.jobs } : {}),
  });
  return config;
}

type Config = ReturnType<typeof harnessConfig>;

/** What the probe harness saw, as it printed it (the session's result). */
interface Seen {
  env: string[];
  session: string;
  sessionRun: string;
  job: string;
  cwd: string;
  pid: number;
  pgid: number;
  /** The MCP revision the harness ended up speaking with the gateway. */
  protocol: string;
  listed: string[];
  /** Each listed name's `_meta["oz0/tool"]`. */
  listedAs: Record<string, string>;
  calls: Array<{
    name: string;
    isError?: boolean;
    text?: string;
    key?: string;
    rejected?: string;
    progress: unknown[];
  }>;
  raw: Array<number | string>;
  listChanged: number;
}

function sessionOf(trace: JobTrace, n = 1): SessionTrace {
  const found = trace.steps.filter(isSessionTrace)[n - 1];
  if (!found) throw new Error(`no live session ${n} in the trace`);
  return found;
}

function seenOf(session: SessionTrace): Seen {
  return session.result?.structuredContent as unknown as Seen;
}

async function run(config: Config, spec: JobSpec, during?: (jobId: string) => Promise<void>) {
  const node = await createNode({ config, logger });
  return node.runUntil(async () => {
    const handle = await startJob(
      { client: temporal.client, taskQueue: config.temporal.taskQueue, harnesses: Object.keys(config.harnesses) },
      spec,
      { workflowId: uniqueId('live') },
    );
    await during?.(handle.workflowId);
    const trace: JobTrace = await handle.result();
    return { trace, jobId: handle.workflowId, node };
  });
}

const probe = (input: object) => ({ session: { harness: 'probe', input } });

test('H1-H4: a harness decides its calls; each is one call of the job with its key (K3 in a session, K2 else), on the session’s node; its last line is the result', async () => {
  const config = harnessConfig();
  const set = (status: string) => ({ call: 'ledger.set_status', args: { id: 't-h', status } });
  const { trace, jobId, node } = await run(config, {
    tenant: uniqueId('t'),
    steps: [
      probe({
        steps: [{ list: true }, set('open'), { call: 'reader.echo', args: { text: 'hi' } }, set('closed'), set('open')],
      }),
    ],
  });
  const session = sessionOf(trace);
  const seen = seenOf(session);
  const open = argsDigest({ id: 't-h', status: 'open' });
  const closed = argsDigest({ id: 't-h', status: 'closed' });
  const keys = [
    `${jobId}/s1/set_status#${open}/1`,
    `${jobId}/c2`,
    `${jobId}/s1/set_status#${closed}/1`,
    `${jobId}/s1/set_status#${open}/2`,
  ];
  // What the servers received, in the order the harness made the calls.
  const got = allReceived().filter((r) => (r.key as string | undefined)?.startsWith(jobId));
  expect(got.map((r) => r.key)).toEqual(keys);
  // The harness got the same keys back with each result, and the trace holds the calls in order, in its session.
  expect(seen.calls.map((c) => c.key)).toEqual(keys);
  expect(seen.calls.every((c) => c.isError === false)).toBe(true);
  expect(session).toMatchObject({ session: 's1', kind: 'harness', harness: 'probe', status: 'ended' });
  expect(session.runs).toEqual([{ run: 1, node: node.identity.id, ended: 'exited 0' }]);
  expect(session.calls.map((c) => [c.n, c.tool, c.key, c.sessionRun])).toEqual([
    [1, 'ledger.set_status', keys[0], 1],
    [2, 'reader.echo', keys[1], 1],
    [3, 'ledger.set_status', keys[2], 1],
    [4, 'ledger.set_status', keys[3], 1],
  ]);
  // H2: its own process group and folder, and exactly its configured environment plus OZ0_*. The group is led by its
  // sandbox's bwrap, outside its pid namespace: 0 from inside (I1; the node's view is in isolation.test.ts).
  expect(seen.pgid).toBe(0);
  expect(seen.cwd.startsWith(path.resolve(config.baseDir, config.node.stateDir, 'sessions'))).toBe(true);
  expect(seen.env).toEqual(
    [
      'HARNESS_MARK',
      'NODE_PATH',
      'OZ0_INPUT',
      'OZ0_JOB',
      'OZ0_MCP_TOKEN',
      'OZ0_MCP_URL',
      'OZ0_SESSION',
      'OZ0_SESSION_RUN',
    ].sort(),
  );
  expect([seen.job, seen.session, seen.sessionRun]).toEqual([jobId, 's1', '1']);
  // H3: the tools of its patterns, under the names a model takes; the remote one is not approved, so not listed.
  expect(seen.listed).toEqual(
    expect.arrayContaining(['ledger__charge', 'ledger__set_status', 'reader__echo', 'box__echo']),
  );
  expect(seen.listedAs).toMatchObject({ ledger__charge: 'ledger.charge', box__echo: 'box.echo' });
  expect(seen.listed.some((t) => t.startsWith('web'))).toBe(false);
});

test('H3: every tool is listed under a name a model API takes, one-to-one with server.function; a call by either name is the same call of the same function (K3), and the trace and metrics say server.function', async () => {
  const config = harnessConfig();
  const metricsPort = await freePort();
  config.node.metricsPort = metricsPort;
  const long = 'names.generate_the_quarterly_financial_report_for_every_region_and_currency';
  const tools = ['names.set_status', 'names.docs.read', 'names._hidden', 'names.a__b', long];
  const by = (name: string, id: string) => ({ call: name, args: { id } });
  const tenant = uniqueId('t');
  let metrics = '';
  const { trace, jobId } = await run(
    config,
    {
      tenant,
      steps: [
        {
          session: {
            harness: 'namer',
            input: {
              steps: [
                { list: true },
                by('names__set_status', 'x'),
                by('names.set_status', 'x'),
                by(modelToolName('names.docs.read'), 'd'),
                by('names.docs.read', 'd'),
                by(modelToolName(long), 'l'),
                by(modelToolName('names._hidden'), 'h'),
                by('names.a__b', 'a'),
                // The model name of a function its server does not list: taken as names.nope is.
                by('names__nope', 'n'),
                // Neither name of one of its tools: refused at the gateway.
                by('names__docs_read__0000000000000000', 'n'),
              ],
            },
          },
        },
      ],
    },
    // O1: the node's series once the job has ended, read while the node still serves them.
    async (id) => {
      await temporal.client.workflow.getHandle(id).result();
      metrics = await (await fetch(`http://127.0.0.1:${metricsPort}/metrics`)).text();
    },
  );
  const seen = seenOf(sessionOf(trace));
  // Every name a model takes; each one's `_meta["oz0/tool"]` is its tool, one name a tool.
  expect(seen.listed.every((name) => MODEL_NAME_PATTERN.test(name))).toBe(true);
  expect(Object.values(seen.listedAs).sort()).toEqual([...tools].sort());
  expect(new Set(seen.listed).size).toBe(tools.length);
  expect(seen.listedAs.names__set_status).toBe('names.set_status');
  // Past 64 characters, and with a dot: a readable prefix and a digest.
  const longName = seen.listed.find((name) => seen.listedAs[name] === long)!;
  expect(longName).toMatch(/^names__generate_the_quarterly_financial_re\w*__[0-9a-f]{16}$/);
  expect(longName.length).toBeLessThanOrEqual(64);
  expect(seen.listed.find((name) => seen.listedAs[name] === 'names.docs.read')).toMatch(
    /^names__docs_read__[0-9a-f]{16}$/,
  );
  // On the server's side: both names made the same function's calls, keyed as one function's (K3: /1, then /2).
  const got = readReceived(namesReceived).filter((r) => (r.key as string).startsWith(jobId));
  const d = (id: string) => argsDigest({ id });
  expect(got.map((r) => [r.name, r.key])).toEqual([
    ['set_status', `${jobId}/s1/set_status#${d('x')}/1`],
    ['set_status', `${jobId}/s1/set_status#${d('x')}/2`],
    ['docs.read', `${jobId}/s1/docs.read#${d('d')}/1`],
    ['docs.read', `${jobId}/s1/docs.read#${d('d')}/2`],
    [long.slice('names.'.length), `${jobId}/s1/${long.slice('names.'.length)}#${d('l')}/1`],
    ['_hidden', `${jobId}/s1/_hidden#${d('h')}/1`],
    ['a__b', `${jobId}/s1/a__b#${d('a')}/1`],
  ]);
  expect(seen.calls.map((c) => c.isError)).toEqual([false, false, false, false, false, false, false, true, true]);
  expect(seen.calls[7].text).toContain('server "names" has no function "nope"');
  expect(seen.calls[8].text).toBe(
    "oz0: names__docs_read__0000000000000000 is not one of this harness's tools (names.*)",
  );
  // The trace names each call server.function, whichever name the harness used; the one refused never reached it.
  expect(sessionOf(trace).calls.map((c) => c.tool)).toEqual([
    'names.set_status',
    'names.set_status',
    'names.docs.read',
    'names.docs.read',
    long,
    'names._hidden',
    'names.a__b',
    'names.nope',
  ]);
  // O1: the gateway's calls are counted by server.function, and the names that are neither under (unknown).
  const count = (tool: string) =>
    Number(
      new RegExp(`^oz0_gateway_calls_total\\{(?=[^}]*tenant="${tenant}")[^}]*tool="${tool}"[^}]*\\} (\\d+)`, 'm').exec(
        metrics,
      )?.[1],
    );
  expect([count('names.set_status'), count('names.docs.read'), count('\\(unknown\\)')]).toEqual([2, 2, 2]);
  expect(metrics).not.toContain('tool="names__');
});

test('H1: a spec naming a harness the config lacks is refused before any workflow starts, naming the field; started raw, the workflow refuses it', async () => {
  const config = harnessConfig();
  const spec = { tenant: 'acme', steps: [{ session: { harness: 'nope', input: {} } }] };
  const workflowId = uniqueId('bad');
  const err = await startJob(
    { client: temporal.client, taskQueue: config.temporal.taskQueue, harnesses: Object.keys(config.harnesses) },
    spec,
    { workflowId },
  ).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(JobSpecError);
  expect((err as Error).message).toContain('steps[0].session.harness');
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await temporal.client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: uniqueId('raw'),
      args: [spec],
    });
    const failed = await handle.result().catch((e: unknown) => e);
    expect(failed).toBeInstanceOf(WorkflowFailedError);
    expect(((failed as WorkflowFailedError).cause as Error).message).toContain('steps[0].session.harness');
  });
});

/** What the server's handler hears of a harness's cancel: the harness's words on 2025-11-25, none on 2026-07-28. */
const HEARD = {
  legacy: 'the harness gave up',
  modern: 'the harness closed the call’s stream',
  // oz0 speaks 2026-07-28 to the remote server too: its handler hears that the call's stream closed.
  remote: 'Connection closed',
};

test.each([
  ['stdio (a plugin server)', 'legacy', 'reader', HEARD.legacy],
  ['stdio (a plugin server)', 'auto', 'reader', HEARD.modern],
  ['Streamable HTTP (a remote server, 2026-07-28)', 'legacy', 'web', HEARD.remote],
  ['a sandboxed server, which is stopped too (C3)', 'auto', 'box', HEARD.modern],
] as const)(
  'H5: the harness’s cancel for a request stops that call: %s, the harness speaking %s, hears it',
  async (_kind, protocol, server, heard) => {
    const config = harnessConfig();
    const tenant = uniqueId('t');
    const node = await createNode({ config, logger });
    const { trace, jobId } = await node.runUntil(async () => {
      if (server === 'web') await approve(temporal, config, tenant, 'web');
      const handle = await startJob(
        { client: temporal.client, taskQueue: config.temporal.taskQueue },
        {
          tenant,
          // The harness stays a moment after its cancel: its notification must not die with its connection.
          steps: [
            probe({
              protocol,
              // Cancelled a moment after the server said it began: a loaded machine may take seconds to get there.
              steps: [
                { call: `${server}.sleep`, args: { ms: 60_000 }, cancelOnProgress: true, cancelAfterMs: 300 },
                { sleep: 1000 },
              ],
            }),
          ],
        },
      );
      return { trace: (await handle.result()) as JobTrace, jobId: handle.workflowId };
    });
    const mine = allReceived().filter((r) => (r.key as string | undefined)?.startsWith(jobId));
    expect(mine.map((r) => r.event)).toEqual(['start', 'cancelled']);
    expect(String(mine[1].reason)).toContain(heard);
    const session = sessionOf(trace);
    expect(session.calls[0].attempts.at(-1)).toMatchObject({ outcome: 'cancelled' });
    expect(seenOf(session).calls[0].rejected).toBeDefined();
    expect(seenOf(session).protocol).toBe(protocol === 'legacy' ? '2025-11-25' : '2026-07-28');
    if (server === 'box') expect(node.pool.hasSandbox({ tenant, jobId })).toBe(false);
  },
);

test('H5 (issue 26.6): after a harness’s notifications/cancelled, the gateway ends that call’s response once the call has stopped, while the harness’s session goes on', async () => {
  const config = harnessConfig();
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await startJob(
      { client: temporal.client, taskQueue: config.temporal.taskQueue },
      {
        tenant: 'acme',
        // 2025-11-25: the cancel is a notification on the harness's session, which stays open 6 s after it.
        steps: [
          probe({
            protocol: 'legacy',
            // The reader started by a first call, so the second is running on it when the harness cancels it.
            steps: [
              { call: 'reader.echo', args: { text: 'up' } },
              { call: 'reader.sleep', args: { ms: 60_000 }, cancelOnProgress: true, cancelAfterMs: 1500 },
              { sleep: 6000 },
            ],
          }),
        ],
      },
      { workflowId: uniqueId('held') },
    );
    const mine = () =>
      allReceived().filter((r) => r.tool === 'sleep' && (r.key as string | undefined)?.startsWith(handle.workflowId));
    await eventually(() => (mine().length === 1 ? true : undefined), 30_000, 'the call to start');
    // On the gateway's side: the call's POST is open while the call runs, and ended once it has stopped.
    expect(node.gateway.openPosts).toBe(1);
    await eventually(() => (mine().length === 2 ? true : undefined), 10_000, 'the call to be cancelled');
    await eventually(() => (node.gateway.openPosts === 0 ? true : undefined), 4000, 'the response to end');
    expect(mine().map((r) => r.event)).toEqual(['start', 'cancelled']);
    // ... while the harness still runs, its session open (before, the response stayed until it deleted the session).
    expect(await jobStatus(temporal.client, handle.workflowId)).toBe('running');
    const session = sessionOf((await handle.result()) as JobTrace);
    expect(seenOf(session).calls[1].rejected).toBeDefined();
  });
});

test('H5/C4: a job cancel stops the harness’s running calls, then the harness (SIGTERM); cancelling until all stopped, then CANCELED', async () => {
  const config = harnessConfig();
  const log = path.join(harnessLogs, `${uniqueId('harness')}.jsonl`);
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await startJob(
      { client: temporal.client, taskQueue: config.temporal.taskQueue },
      {
        tenant: uniqueId('t'),
        steps: [
          // After its call is stopped the harness would go on (a long sleep): the job's cancel must stop it too.
          probe({ log, steps: [{ call: 'reader.sleep', args: { ms: 60_000 } }, { sleep: 60_000 }] }),
          { call: 'reader.echo', args: { text: 'never' } },
        ],
      },
    );
    const jobId = handle.workflowId;
    const mine = () => allReceived().filter((r) => (r.key as string | undefined)?.startsWith(jobId));
    await eventually(() => mine().find((r) => r.event === 'start'), 30_000, 'the harness’s call to start');
    await handle.cancel();
    expect(await jobStatus(temporal.client, jobId)).toMatch(/cancelling|CANCELED/);
    await expect(handle.result()).rejects.toThrow();
    expect(await jobStatus(temporal.client, jobId)).toBe('CANCELED');
    const cancelled = mine().find((r) => r.event === 'cancelled');
    const harness = readReceived(log);
    const sigterm = harness.find((r) => r.event === 'sigterm');
    expect(cancelled).toBeDefined();
    expect(sigterm).toBeDefined();
    // Calls first, then the harness.
    expect(sigterm!.t as number).toBeGreaterThanOrEqual(cancelled!.t as number);
    expect(hostProcesses(`oz0-harness ${harness[0].instance as string}`)).toEqual([]);
    expect(mine().some((r) => r.tool === 'echo')).toBe(false);
  });
});

/** The two ways a harness may speak to its gateway: 2025-11-25's handshake, or 2026-07-28 (server/discover). */
const HARNESS_PROTOCOLS = [
  ['2025-11-25', 'legacy'],
  ['2026-07-28', 'auto'],
] as const;

test.each(HARNESS_PROTOCOLS)(
  'H6 (the harness on %s): a call’s progress reaches the harness as notifications/progress under its own token',
  async (version, protocol) => {
    const config = harnessConfig();
    const { trace } = await run(config, {
      tenant: uniqueId('t'),
      steps: [
        probe({ protocol, steps: [{ call: 'reader.read_pages', args: { pages: 4, page_ms: 200 }, progress: true }] }),
      ],
    });
    expect(seenOf(sessionOf(trace)).protocol).toBe(version);
    const call = seenOf(sessionOf(trace)).calls[0];
    expect(call.isError).toBe(false);
    expect(call.progress.length).toBeGreaterThanOrEqual(2);
    const values = (call.progress as Array<{ progress: number; total: number }>).map((p) => p.progress);
    expect(values).toEqual([...values].sort((a, b) => a - b));
    expect(call.progress.at(-1)).toMatchObject({ total: 4 });
  },
);

test('H7: a non-zero exit, a crash and a harness past its time limit each end their session with an error result that says which; the job goes on; stderr reaches the node log without the token', async () => {
  const config = harnessConfig({ harnessTimeout: 3 });
  const log = path.join(harnessLogs, `${uniqueId('harness')}.jsonl`);
  const { trace } = await run(config, {
    tenant: uniqueId('t'),
    steps: [
      probe({ steps: [{ stderr: 'about to fail' }, { exit: 3 }], log, tellToken: true }),
      probe({ steps: [{ crash: true }] }),
      probe({ steps: [{ sleep: 60_000 }] }),
      probe({ steps: [{ stdout: 'not json at all' }, { exit: 0 }] }),
      { call: 'reader.echo', args: { text: 'after' } },
    ],
  });
  const results = trace.steps.filter(isSessionTrace).map((s) => s.result!);
  const text = (i: number) => (results[i].content[0] as { text: string }).text;
  expect(results.slice(0, 3).map((r) => r.isError)).toEqual([true, true, true]);
  expect(text(0)).toContain('exited with code 3');
  expect(text(0)).toContain('about to fail');
  expect(text(1)).toContain('killed by SIGSEGV');
  expect(text(2)).toContain('ran past its timeout of 3 s');
  expect(results[3]).toEqual({ isError: false, content: [{ type: 'text', text: 'not json at all' }] });
  expect(trace.steps.at(-1)).toMatchObject({ tool: 'reader.echo', result: { isError: false } });
  const token = readReceived(log)[0].token as string;
  const nodeLog = fs.readFileSync(logFileOf(expect.getState().testPath!), 'utf8');
  expect(nodeLog).toContain('my token is [redacted]');
  expect(nodeLog).not.toContain(token);
});

test('I10: a harness that writes 64 MiB on stderr puts at most its first 256 KiB (or 1,000 lines) in the node’s log, then the count and its last lines; its session ends as it should; 200 lines all reach the log (the control)', async () => {
  const config = harnessConfig();
  const nodeLog = logFileOf(expect.getState().testPath!);
  const before = fs.statSync(nodeLog).size;
  const { trace } = await run(config, {
    tenant: uniqueId('t'),
    steps: [
      probe({ steps: [{ stderrLines: 65_536, prefix: 'flood' }] }),
      probe({ steps: [{ stderrLines: 200, prefix: 'calm' }] }),
    ],
  });
  const [flood, control] = trace.steps.filter(isSessionTrace).map((s) => s.result!);
  expect([flood.isError, control.isError]).toEqual([false, false]);
  const grew = fs.statSync(nodeLog).size - before;
  const lines = fs.readFileSync(nodeLog, 'utf8').split('\n');
  // 64 MiB written; the log took its first lines up to the bound, and a summary: under 1 MiB with their JSON.
  expect(grew).toBeLessThan(1024 * 1024);
  const logged = lines.filter((l) => l.includes('"stderr":"flood '));
  expect(logged.length).toBeGreaterThan(200);
  expect(logged.length * 1024).toBeLessThanOrEqual(LOGGED_STDERR_BYTES + 1024);
  expect(logged[0]).toContain('flood 00000000');
  const summary = lines
    .filter((l) => l.includes('harness stderr past its bound'))
    .map((l) => JSON.parse(l) as { droppedLines: number; lastLines: string });
  expect(summary).toEqual([expect.objectContaining({ droppedLines: 65_536 - logged.length })]);
  expect(summary[0].lastLines).toContain('flood 00065535');
  // The control: a harness within the bound has every line in the log, and no summary.
  expect(lines.filter((l) => l.includes('"stderr":"calm '))).toHaveLength(200);
});

test.each(HARNESS_PROTOCOLS)(
  'H3 (the harness on %s): only a running session’s bearer token is answered (401), bad bodies cost the harness an error, a kill switch sends list_changed; the token dies with its session',
  async (version, protocol) => {
    const config = harnessConfig();
    const tenant = uniqueId('t');
    const log = path.join(harnessLogs, `${uniqueId('harness')}.jsonl`);
    const initialize = JSON.stringify({
      jsonrpc: '2.0',
      id: 1,
      method: 'initialize',
      params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } },
    });
    const target = policyTargetOf(config, temporal.client);
    let url = '';
    const { trace } = await run(
      config,
      {
        tenant,
        steps: [
          probe({
            log,
            tellToken: true,
            protocol,
            steps: [
              { raw: { token: 'not-a-token', body: initialize } },
              { raw: { token: null, body: initialize } },
              { raw: { size: 3 * 1024 * 1024 } },
              { raw: { body: '{ not json' } },
              { raw: { body: JSON.stringify({ jsonrpc: '2.0', id: 2, method: 'tools/call' }) } },
              { list: true },
              { stdout: 'listed' },
              { note: 'listed' },
              { waitListChanged: 20_000 },
              { list: true },
            ],
          }),
        ],
      },
      async () => {
        // Once the harness has listed, a kill switch on one of its tools changes what it may call.
        await eventually(() => readReceived(log).find((r) => r.event === 'listed'), 30_000, 'the harness to list');
        await changePolicy(target, tenant, killUpdate, ['ledger.charge']);
      },
    );
    const seen = seenOf(sessionOf(trace));
    expect(seen.protocol).toBe(version);
    expect(seen.raw).toEqual([401, 401, 413, 400, 400]);
    // On 2025-11-25 list_changed reaches the harness's session; on 2026-07-28, its listen stream.
    expect(seen.listChanged).toBeGreaterThanOrEqual(1);
    expect(seen.listed).not.toContain('ledger__charge');
    expect(seen.listed).toContain('ledger__set_status');
    const token = readReceived(log)[0].token as string;
    // Another node, run while it is asked and shut down after (its gateway closes with it).
    const other = await createNode({ config, logger });
    url = other.gateway.url;
    const after = await other.runUntil(() =>
      fetch(url, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': 'application/json',
          accept: 'application/json, text/event-stream',
        },
        body: initialize,
      }),
    );
    expect(after.status).toBe(401);
  },
);

test('H10: calls past jobs.maxCallsPerSession get error results that say so; continue-as-new waits for the end of a session (K6)', async () => {
  const config = harnessConfig({ jobs: { maxCallsPerSession: 2, continueAsNewAfterCalls: 1 } });
  const echo = (text: string) => ({ call: 'reader.echo', args: { text } });
  const { trace, jobId } = await run(config, {
    tenant: uniqueId('t'),
    steps: [
      { call: 'reader.echo', args: { text: 'before' } },
      probe({ steps: [echo('1'), echo('2'), echo('3')] }),
      probe({ steps: [echo('4')] }),
    ],
  });
  const first = seenOf(sessionOf(trace, 1));
  expect(first.calls.map((c) => c.isError)).toEqual([false, false, true]);
  expect(first.calls[2].text).toContain('jobs.maxCallsPerSession');
  // Each session ran within one run of the job: its calls' keys all carry that run's r<m>/.
  expect(first.calls.slice(0, 2).map((c) => c.key)).toEqual([`${jobId}/r1/c1`, `${jobId}/r1/c2`]);
  expect(seenOf(sessionOf(trace, 2)).calls[0].key).toBe(`${jobId}/r2/c1`);
  expect(trace.run).toBe(2);
});

/** H4/H5 with an example agent: it looks the order up, charges it, makes calls at once and cancels its own slow check. */
async function refundsAgent(harness: string) {
  const config = harnessConfig();
  const orderId = uniqueId('o');
  const { trace, jobId } = await run(config, {
    tenant: uniqueId('t'),
    steps: [{ session: { harness, input: { order_id: orderId, amount: 700, deadline_ms: 1500 } } }],
  });
  const session = sessionOf(trace);
  expect(session.result?.structuredContent).toEqual({
    order_id: orderId,
    action: 'charged 700',
    status: 'set',
    check: 'cancelled at its deadline',
  });
  // On the ledger's and the reader's side: the keys of this job, one charge, and the slow check cancelled.
  const mine = allReceived().filter((r) => (r.key as string | undefined)?.startsWith(jobId));
  expect(mine.filter((r) => r.tool === 'charge')).toHaveLength(1);
  expect(mine.find((r) => r.tool === 'charge')?.args).toEqual({ order_id: orderId, amount: 700 });
  expect(mine.find((r) => r.tool === 'sleep' && r.event === 'cancelled')).toBeDefined();
  expect(session.calls.map((c) => c.tool).sort()).toEqual(
    ['ledger.charge', 'ledger.lookup_order', 'ledger.set_status', 'reader.echo', 'reader.sleep'].sort(),
  );
}

test('H4/H5: the example refunds agent (TypeScript) looks the order up, charges it, then makes calls at once and cancels its own slow check', () =>
  refundsAgent('refunds'));

withPython(
  'H1-H5: the refunds agent in Python, on the MCP Python SDK’s client, does the same through the gateway: one charge, its check cancelled on the reader’s side',
  () => refundsAgent('refunds_py'),
);

test('H3/H4: a function that runs as an MCP task is an ordinary call to the harness: listed without execution, answered when the task ends', async () => {
  const config = harnessConfig();
  const { trace } = await run(config, {
    tenant: uniqueId('t'),
    steps: [
      {
        session: {
          harness: 'tasks',
          input: { steps: [{ list: true }, { call: 'ev.simulate-research-query', args: { topic: 'gateways' } }] },
        },
      },
    ],
  });
  const session = sessionOf(trace);
  const seen = seenOf(session);
  expect(seen.listed).toEqual(['ev__simulate-research-query']);
  expect(seen.calls[0]).toMatchObject({ isError: false, text: expect.stringContaining('Research Report: gateways') });
  expect(session.calls[0].attempts).toEqual([{ attempt: 1, outcome: 'ok', note: expect.stringMatching(/^task \w+$/) }]);
});

test('H9: a harness outside the node — another process with plain @temporalio/client and the exported helper — opens the job’s session, makes calls (progress, a cancel), closes it with a result', async () => {
  const config = harnessConfig();
  const node = await createNode({ config, logger });
  await node.runUntil(async () => {
    const handle = await startJob(
      { client: temporal.client, taskQueue: config.temporal.taskQueue },
      {
        tenant: uniqueId('t'),
        steps: [{ session: { external: true } }, { call: 'reader.echo', args: { text: 'after the session' } }],
      },
    );
    const jobId = handle.workflowId;
    // The harness's own config: where Temporal is, and the keys this machine's processes share (D4).
    const clientConfig = path.join(tmpDir(), 'oz0.config.json');
    const { address, namespace } = temporal.server;
    const seal = { folder: testKeys() };
    fs.writeFileSync(
      clientConfig,
      JSON.stringify({ temporal: { address, namespace }, payloads: { store: 'off', seal } }),
    );
    const out = await new Promise<string>((resolve, reject) => {
      execFile(
        process.execPath,
        [fixture('external-client.js'), clientConfig, jobId],
        { timeout: 120_000 },
        (err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout)),
      );
    });
    const seen = JSON.parse(out.trim().split('\n').at(-1)!) as {
      session: string;
      run: number;
      node: string;
      calls: Array<{ tool: string; key: string; isError: boolean; text?: string }>;
      progress: Array<{ progress: number; total?: number }>;
    };
    const trace: JobTrace = await handle.result();
    expect([seen.session, seen.run, seen.node]).toEqual(['s1', 1, node.identity.id]);
    const open = argsDigest({ id: 'ext-1', status: 'open' });
    expect(seen.calls.map((c) => c.key)).toEqual([`${jobId}/s1/set_status#${open}/1`, `${jobId}/c2`, `${jobId}/c3`]);
    expect(seen.calls.map((c) => c.isError)).toEqual([false, false, true]);
    expect(seen.calls[2].text).toContain('cancelled by its session');
    expect(seen.progress.length).toBeGreaterThanOrEqual(1);
    // What the servers received: the keys, and the cancel of the call the client gave up on.
    const mine = allReceived().filter((r) => (r.key as string | undefined)?.startsWith(jobId));
    expect([...new Set(mine.map((r) => r.key))]).toEqual([...seen.calls.map((c) => c.key), `${jobId}/c4`]);
    expect(mine.find((r) => r.tool === 'sleep' && r.event === 'cancelled')).toBeDefined();
    const session = sessionOf(trace);
    expect(session).toMatchObject({
      kind: 'external',
      status: 'ended',
      result: { structuredContent: { done: true, calls: 3 } },
    });
    expect(session.runs).toEqual([
      { run: 1, node: node.identity.id, client: 'external-client.js', ended: 'closed by its client' },
    ]);
    expect(trace.steps.at(-1)).toMatchObject({ tool: 'reader.echo', result: { isError: false } });
  });
});

test('H4 (trace, watch): a live session is its own step; `oz0 job watch` and the trace show its calls as the harness makes them', async () => {
  const config = harnessConfig();
  const snapshots: WatchSnapshot[] = [];
  const out = new Writable({
    write(chunk: Buffer, _enc, done) {
      for (const line of chunk.toString().split('\n').filter(Boolean)) snapshots.push(JSON.parse(line));
      done();
    },
  }) as unknown as NodeJS.WriteStream;
  const { trace, jobId } = await run(
    config,
    {
      tenant: uniqueId('t'),
      steps: [
        probe({
          steps: [
            { call: 'reader.echo', args: { text: 'one' } },
            { call: 'reader.sleep', args: { ms: 3000 } },
          ],
        }),
      ],
    },
    async (id) => {
      await watchJob(temporal.client, id, { json: true, out, intervalMs: 200 });
    },
  );
  const live = snapshots.find(
    (s) => s.sessions[0]?.status === 'running' && s.calls.some((c) => c.tool === 'reader.sleep'),
  );
  expect(live).toBeDefined();
  expect(live!.sessions[0]).toMatchObject({ session: 's1', kind: 'harness', harness: 'probe', run: 1, running: 1 });
  expect(live!.calls.find((c) => c.tool === 'reader.sleep')!.key).toBe(`${jobId}/c2`);
  expect(snapshots.at(-1)!.status).toBe('COMPLETED');
  const table = formatTrace({ ...trace, status: 'COMPLETED' });
  expect(table).toContain('session s1, harness probe, ended; run 1 on');
  expect(table).toContain(`${jobId}/c2`);
});
