/**
 * Which MCP revision oz0 speaks with each server (issue 25.1, 25.5, 25.6): 2026-07-28 with a server that offers it,
 * the initialize handshake (2025-11-25) with one that does not, chosen when it connects, on each kind of server; each
 * server started once for it; what a server that asks for input gets. Read from the servers' side: the methods each
 * process received, and how many processes started.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import type { LoadedConfig } from '../../common/config';
import type { JobSpec } from '../../model/schemas';
import { callsOf } from '../../model/job';
import { pluginTestCli } from '../helpers/cli';
import { startListening } from '../helpers/listening';
import type { ListeningServer } from '../helpers/listening';
import { python, pythonExample, withPython } from '../helpers/python';
import { createNode } from '../../worker/node';
import { STDIO_PROBE_TIMEOUT_MS } from '../../mcp/negotiate';
import { timestampMs } from '../../common/time';
import { approve, fixture, logger, runJob, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { sandboxed, writableDir } from '../helpers/sandbox';

const temporal = useTemporal();
let legacyRemote: ListeningServer;

beforeAll(async () => {
  // The reference server on SDK 1.x: a remote server of 2025-11-25 only.
  legacyRemote = await startListening('node', [fixture('everything.mjs'), '--http'], {});
});
afterAll(async () => {
  await legacyRemote?.close();
});

/**
 * The probe server (test/fixtures/probe-server.js): both revisions, 2025-11-25 only, or 2025-11-25 and it exits on the
 * probe, or never answers it.
 */
function probe(log: string, protocol: 'both' | 'legacy' | 'exits-on-discover' | 'silent-on-discover', sandbox = false) {
  return {
    command: 'node',
    args: [path.relative(process.cwd(), fixture('probe-server.js'))],
    env: { PROBE_LOG: log, PROBE_PROTOCOL: protocol },
    // I2: a sandbox writes its log only where it is granted to.
    ...(sandbox && { sandbox: sandboxed({ write: [path.dirname(log)] }) }),
  };
}

/**
 * What each process of the probe server received, in order, by its instance (in a sandbox a pid is its namespace's,
 * the same in every sandbox): how many started, and what each was asked.
 */
function processes(log: string): Array<{ instance: string; received: string[] }> {
  const byInstance = new Map<string, string[]>();
  for (const r of readReceived(log)) {
    if (r.event === 'process start') byInstance.set(r.instance as string, []);
    if (r.event === 'received') byInstance.get(r.instance as string)?.push(r.method as string);
  }
  return [...byInstance].map(([instance, received]) => ({
    instance,
    received: received.filter((m) => !m.startsWith('notif')),
  }));
}

/** Jobs one after the other on one node: each job's calls; `ids`, when given, gets each job's workflow id. */
async function jobsOnOneNode(config: LoadedConfig, specs: JobSpec[], ids: string[] = []) {
  const node = await createNode({ config, logger });
  return node.runUntil(async () => {
    const out = [];
    for (const spec of specs) {
      const handle = await temporal.client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId('proto'),
        args: [spec],
      });
      ids.push(handle.workflowId);
      out.push(callsOf(await handle.result()));
    }
    return out;
  });
}

/** Two jobs, each on a node of its own (a fresh node run: a fresh plugin process). */
async function twoJobs(config: LoadedConfig, spec: JobSpec) {
  const first = await runJob(temporal, config, spec);
  const second = await runJob(temporal, config, spec);
  return [callsOf(first.trace)[0], callsOf(second.trace)[0]];
}

test('25.1: a plugin server that offers 2026-07-28 speaks it; each plugin is one process, asked once, that serves every job on the node', async () => {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({ servers: { p: probe(log, 'both') } });
  const jobs = await jobsOnOneNode(
    config,
    [1, 2].map(() => ({ tenant: 'acme', steps: [{ call: 'p.probe' }] })),
  );
  for (const [step] of jobs) expect(step).toMatchObject({ protocol: '2026-07-28', result: { isError: false } });
  // One process for both jobs, asked server/discover once, and never initialize.
  const seen = processes(log);
  expect(seen).toHaveLength(1);
  expect(seen[0].received.filter((m) => m === 'server/discover' || m === 'initialize')).toEqual(['server/discover']);
});

test('25.1: a plugin server of 2025-11-25 only is asked on its one process, then shakes hands on it', async () => {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({ servers: { p: probe(log, 'legacy') } });
  const [a, b] = await twoJobs(config, { tenant: 'acme', steps: [{ call: 'p.probe' }] });
  expect([a.protocol, b.protocol]).toEqual(['2025-11-25', '2025-11-25']);
  const seen = processes(log);
  // A process per node run (runJob starts a node each time): each asked once, on itself, then initialized.
  expect(seen.map((p) => p.received.slice(0, 2))).toEqual([
    ['server/discover', 'initialize'],
    ['server/discover', 'initialize'],
  ]);
});

test('25.1/25.6: a sandboxed server is one process per job, started once: the probe never starts a copy of it', async () => {
  const log = path.join(writableDir(), 'probe.jsonl');
  const config = temporal.config({ servers: { box: probe(log, 'legacy', true) } });
  const spec = { tenant: 'acme', steps: [{ call: 'box.probe' }, { call: 'box.probe' }] };
  const jobs = await jobsOnOneNode(config, [spec, spec]);
  for (const calls of jobs) expect(calls.map((c) => c.protocol)).toEqual(['2025-11-25', '2025-11-25']);
  // Two jobs, two processes, each started once. The first was asked; the node remembered the answer, so the second
  // went straight to the handshake.
  expect(processes(log).map((p) => p.received.slice(0, 2))).toEqual([
    ['server/discover', 'initialize'],
    ['initialize', 'tools/list'],
  ]);
});

/** Two jobs on one node, each calling its own sandbox of an older probe server, which speaks 2025-11-25 with both. */
async function twoOlderSandboxes(protocol: 'exits-on-discover' | 'silent-on-discover') {
  const log = path.join(writableDir(), 'probe.jsonl');
  const config = temporal.config({ servers: { box: probe(log, protocol, true) } });
  const spec = { tenant: 'acme', steps: [{ call: 'box.probe' }] };
  const ids: string[] = [];
  for (const [step] of await jobsOnOneNode(config, [spec, spec], ids)) {
    expect(step).toMatchObject({ protocol: '2025-11-25', result: { isError: false } });
  }
  return { log, ids };
}

/** When a job's first call's attempt started, by the server's clock (the host's): before its server was spawned. */
async function firstAttemptStarted(workflowId: string): Promise<number> {
  const { events } = await temporal.client.workflow.getHandle(workflowId).fetchHistory();
  const started = (events ?? []).find((e) => e.activityTaskStartedEventAttributes);
  return timestampMs(started!.eventTime!);
}

test('25.1, S3: a server that exits on server/discover (as Rust SDK servers do) is asked once more (it may have failed its start), then started for the handshake, and not asked again', async () => {
  const { log } = await twoOlderSandboxes('exits-on-discover');
  expect(processes(log).map((p) => p.received[0])).toEqual([
    'server/discover',
    'server/discover',
    'initialize',
    'initialize',
  ]);
});

test('25.1: a stdio server that never answers server/discover is taken for an older one after the probe time, on the same process; the node does not ask it again', async () => {
  const { log, ids } = await twoOlderSandboxes('silent-on-discover');
  // On the server's side: two processes, one per job, each started once. The first was asked, waited out for the
  // probe's time, and shaken hands with on the same process; the second was not asked.
  const seen = processes(log);
  expect(seen.map((p) => p.received.slice(0, 2))).toEqual([
    ['server/discover', 'initialize'],
    ['initialize', 'tools/list'],
  ]);
  const first = readReceived(log).filter((r) => r.instance === seen[0].instance && r.event === 'received');
  // The node writes the probe as it spawns the process and counts its wait from then; the process reads it only once
  // it has booted (over a second in a sandbox on a loaded machine). So the whole wait is counted from the attempt's
  // start, which comes before the spawn (a few ms for the clocks' rounding), and the server's own view bounds it above.
  const initialized = first[1].t as number;
  expect(initialized - (await firstAttemptStarted(ids[0]))).toBeGreaterThanOrEqual(STDIO_PROBE_TIMEOUT_MS - 5);
  expect(initialized - (first[0].t as number)).toBeLessThan(STDIO_PROBE_TIMEOUT_MS + 5000);
});

test.each([
  ['2025-11-25 only (the reference server, SDK 1.x)', '2025-11-25', 'legacy'],
  ['both (an example server, SDK 2.x)', '2026-07-28', 'both'],
] as const)('25.1: a remote server that speaks %s: oz0 speaks %s with it', async (_what, protocol, kind) => {
  const log = path.join(tmpDir(), 'received.jsonl');
  const server = kind === 'legacy' ? { url: legacyRemote.url } : { url: (await startExample(log)).url };
  const config = temporal.config({ servers: { r: server } });
  const tenant = uniqueId('t');
  const args = kind === 'legacy' ? { message: 'hi' } : { text: 'hi' };
  const { trace } = await runJob(temporal, config, { tenant, steps: [{ call: 'r.echo', args }] }, uniqueId('r'), () =>
    approve(temporal, config, tenant, 'r'),
  );
  expect(callsOf(trace)[0]).toMatchObject({ protocol, result: { isError: false } });
});

let example: ListeningServer | undefined;
async function startExample(log: string): Promise<ListeningServer> {
  example ??= await startListening('node', [path.join('dist', 'examples', 'reader.js'), '--http', '0'], {
    OZ0_RECEIVED_LOG: log,
  });
  return example;
}
afterAll(async () => {
  await example?.close();
});

test('25.1: a server pinned to 2026-07-28 that offers only 2025-11-25 is refused before anything is sent, saying why', async () => {
  const log = path.join(tmpDir(), 'probe.jsonl');
  const config = temporal.config({
    servers: { p: { ...probe(log, 'legacy'), protocol: '2026-07-28' } },
    tools: { '*': { maxAttempts: 1 } },
  });
  const { trace } = await runJob(temporal, config, { tenant: 'acme', steps: [{ call: 'p.probe' }] });
  const [step] = callsOf(trace);
  expect(step.attempts).toEqual([
    {
      attempt: 1,
      outcome: 'failed',
      note: expect.stringMatching(/^the server was not reachable: .*did not offer pinned protocol version 2026-07-28/),
    },
  ]);
  expect(processes(log).flatMap((p) => p.received)).toEqual(['server/discover']);
});

describe('25.5: a server that asks for what oz0 does not offer (the Python reports server)', () => {
  const log = path.join(tmpDir(), 'reports.jsonl');
  const reports = (protocol?: string) => ({
    command: python!,
    args: [pythonExample('reports')],
    env: { OZ0_RECEIVED_LOG: log },
    ...(protocol && { protocol }),
  });

  withPython(
    'input_required (2026-07-28): the call ends at once with an error result naming the elicitation; the job goes on',
    async () => {
      const config = temporal.config({ servers: { rep: reports() } });
      const { trace, handle } = await runJob(temporal, config, {
        tenant: 'acme',
        steps: [
          { call: 'rep.archive_orders', args: { before: '2026-01-01' } },
          { call: 'rep.export_orders', args: { rows: 1 } },
        ],
      });
      const [asked, next] = callsOf(trace);
      const words = 'elicitation ("Archive every order before 2026-01-01?")';
      expect(asked.attempts).toEqual([
        { attempt: 1, outcome: 'error', note: `the server asked for ${words}: not offered` },
      ]);
      expect(asked.result).toEqual({
        isError: true,
        content: [
          { type: 'text', text: expect.stringContaining(`the server asked for ${words}, which oz0 does not offer`) },
        ],
      });
      expect(next.result.isError).toBe(false);
      // The server was asked once, and never answered: no second round.
      const calls = readReceived(log).filter((r) => r.tool === 'archive_orders' && r.key === `${handle.workflowId}/c1`);
      expect(calls).toHaveLength(1);
    },
  );

  withPython.each(['2026-07-28', '2025-11-25'])(
    '-32021 (the Python SDK’s resolver refuses a client without elicitation), on %s: an error result naming it; nothing purged',
    async (protocol) => {
      const config = temporal.config({ servers: { rep: reports(protocol) } });
      const { trace } = await runJob(temporal, config, {
        tenant: 'acme',
        steps: [{ call: 'rep.purge_orders', args: { before: '2026-01-01' } }],
      });
      const [step] = callsOf(trace);
      expect(step.protocol).toBe(protocol);
      expect(step.attempts).toEqual([
        { attempt: 1, outcome: 'error', note: 'the server needs elicitation: not offered' },
      ]);
      expect(step.result.content).toEqual([
        {
          type: 'text',
          text: expect.stringContaining('the server refused the call: it needs a client that offers elicitation'),
        },
      ]);
      expect(readReceived(log).filter((r) => r.event === 'purge')).toEqual([]);
    },
  );

  withPython(
    '25.1/25.5: oz0 plugin test says which revision the server speaks, and names the functions its drill file calls that ask for input',
    async () => {
      const dir = tmpDir();
      const configFile = path.join(dir, 'oz0.config.json');
      const drillFile = path.join(dir, 'oz0.drill.json');
      fs.writeFileSync(configFile, JSON.stringify({ servers: { rep: reports(), old: reports('2025-11-25') } }));
      fs.writeFileSync(
        drillFile,
        JSON.stringify({
          samples: {
            archive_orders: { args: { before: '2026-01-01' } },
            purge_orders: { args: { before: '2026-01-01' } },
            export_orders: { args: { rows: 1 } },
          },
        }),
      );
      const modern = await pluginTestCli(configFile, 'rep', '--drill-file', drillFile);
      expect(modern.report.protocol).toBe('2026-07-28');
      expect(modern.report.tasks).toEqual({ offered: true, form: 'extension', functions: [] });
      expect(modern.report.findings).toEqual([
        expect.objectContaining({ function: 'archive_orders', check: 'asks-for-input', severity: 'error' }),
        expect.objectContaining({ function: 'purge_orders', check: 'asks-for-input', severity: 'error' }),
      ]);
      expect(modern.code).toBe(1);
      const old = await pluginTestCli(configFile, 'old', '--drill-file', drillFile);
      expect(old.report.protocol).toBe('2025-11-25');
      expect(old.report.tasks).toEqual({ offered: false, functions: [] });
      expect(old.report.findings.map((f) => [f.function, f.check])).toEqual([
        ['archive_orders', 'sample-error'],
        ['purge_orders', 'asks-for-input'],
      ]);
    },
  );
});
