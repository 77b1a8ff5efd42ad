/**
 * Servers written in Python on the MCP Python SDK (examples/python/, PyPI mcp in the project's venv), as the seeds
 * write them, run as plugin, sandboxed and remote servers on a real node and a real Temporal dev server. What the
 * servers received and did is read from their own log (OZ0_RECEIVED_LOG), never from oz0's word.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import type { LoadedConfig } from '../../common/config';
import type { JobSpec } from '../../model/schemas';
import { createNode } from '../../worker/node';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { ROOT, approve, eventually, fixture, logger, runJob, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { python, pythonExample, pythonMissing, servePythonHttp, withPython } from '../helpers/python';
import type { PythonHttp } from '../helpers/python';
import { logFileOf } from '../logs';
import { startListening } from '../helpers/listening';
import { pluginTestCli } from '../helpers/cli';
import { hostProcesses, writableDir } from '../helpers/sandbox';

const temporal = useTemporal();

beforeAll(async () => {
  if (!python) return;
});

if (!python) test.skip(`Python servers: skipped, ${pythonMissing}`, () => undefined);

/**
 * A stdio server of the examples: a plugin server, or with `sandbox` the job's own. A sandbox's command and script
 * are given relative to the config's folder, as a user writes them: the node makes them absolute (it runs elsewhere).
 */
function stdio(name: string, env: Record<string, string>, sandbox = false) {
  if (!sandbox) return { command: python!, args: [pythonExample(name)], env, protocol };
  const relative = (file: string) => (file.startsWith(`${ROOT}/`) ? path.relative(ROOT, file) : file);
  // I2: the venv comes with its command; the kit beside the example, and the folder of its log, are granted.
  const grants = { read: ['examples/python'], write: env.OZ0_RECEIVED_LOG ? [path.dirname(env.OZ0_RECEIVED_LOG)] : [] };
  return { command: relative(python!), args: [relative(pythonExample(name))], env, sandbox: grants, protocol };
}

/**
 * The MCP revision the tests below speak with the Python servers: each runs on both, the SDK serving either (2.3.0
 * answers server/discover and initialize alike). Set by the describe that runs them.
 */
let protocol: '2025-11-25' | '2026-07-28' = '2026-07-28';

function start(config: LoadedConfig, spec: JobSpec) {
  return temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('py'),
    args: [spec],
  });
}

/**
 * A job calls the remote Bookshop's order_book and is cancelled while it holds a copy: what the server's log then
 * says of that order (`hold`, then `cancelled` or `ordered`, then `released`).
 */
async function cancelMidOrder(url: string, revision: string, log: string): Promise<unknown[]> {
  const config = temporal.config({ servers: { shop: { url, protocol: revision } } });
  const node = await createNode({ config, logger });
  const tenant = uniqueId('t');
  const title = uniqueId('book');
  return node.runUntil(async () => {
    await approve(temporal, config, tenant, 'shop');
    const handle = await start(config, { tenant, steps: [{ call: 'shop.order_book', args: { title } }] });
    await eventually(() => readReceived(log).find((r) => r.title === title), 30_000, 'the hold');
    await handle.cancel();
    await expect(handle.result()).rejects.toThrow();
    const events = await eventually(() => {
      const mine = readReceived(log).filter((r) => r.title === title);
      return mine.length >= 3 ? mine : undefined;
    }, 10_000);
    return events.map((r) => r.event);
  });
}

describe.each(['2025-11-25', '2026-07-28'] as const)('the MCP Python SDK on MCP %s', (version) => {
  beforeAll(() => {
    protocol = version;
  });

  withPython(
    'C2/C3 on a sandboxed Python server: a cancelled order_book runs its finally and its shielded cleanup, and the server exits on its own before the node signals it',
    async () => {
      const log = path.join(writableDir(), 'bookshop.jsonl');
      const config = temporal.config({
        servers: { shop: stdio('bookshop', { OZ0_RECEIVED_LOG: log }, true) },
      });
      const node = await createNode({ config, logger });
      await node.runUntil(async () => {
        const handle = await start(config, {
          tenant: 'acme',
          steps: [{ call: 'shop.order_book', args: { title: 'Dune' } }],
        });
        const hold = await eventually(() => readReceived(log).find((r) => r.event === 'hold'), 30_000, 'the hold');
        await handle.cancel();
        await expect(handle.result()).rejects.toThrow();
        const events = readReceived(log).filter((r) => r.instance === hold.instance);
        // On the server's side, in order: the handler was cancelled, its shielded release ran to its end (the hold is
        // gone), and the process exited by itself (atexit ran: no signal killed it).
        expect(events.map((r) => r.event)).toEqual(['hold', 'cancelled', 'released', 'exit']);
        expect(events[2].held).toEqual([]);
        expect(hostProcesses(pythonExample('bookshop'))).toEqual([]);
        expect(node.pool.hasSandbox({ tenant: 'acme', jobId: handle.workflowId })).toBe(false);
      });
    },
  );

  withPython(
    'C2/C3 on a sandboxed Python server: a plain def tool that asks check_cancelled stops between books and puts search back online',
    async () => {
      const log = path.join(writableDir(), 'bookshop.jsonl');
      const config = temporal.config({
        servers: { shop: stdio('bookshop', { OZ0_RECEIVED_LOG: log, BOOKSHOP_SECONDS_PER_BOOK: '0.3' }, true) },
      });
      const titles = Array.from({ length: 20 }, (_, i) => `book ${i + 1}`);
      const node = await createNode({ config, logger });
      await node.runUntil(async () => {
        const handle = await start(config, {
          tenant: 'acme',
          steps: [{ call: 'shop.rebuild_index', args: { titles } }],
        });
        await eventually(
          () => readReceived(log).find((r) => r.event === 'indexed' && r.indexed === 2),
          30_000,
          'book 2',
        );
        await handle.cancel();
        await expect(handle.result()).rejects.toThrow();
        // The thread stopped at its next check_cancelled, ran its finally (search back online), and the server exited.
        const events = readReceived(log);
        expect(events.slice(-2).map((r) => r.event)).toEqual(['online', 'exit']);
        const indexed = events.at(-2)!.indexed as number;
        expect(indexed).toBeGreaterThanOrEqual(2);
        expect(indexed).toBeLessThan(titles.length);
        expect(events.filter((r) => r.event === 'indexed')).toHaveLength(indexed);
      });
    },
  );

  withPython(
    'C6/C7 on a sandboxed Python server: a read past its time limit is tried again in a fresh server, only after the first one exited',
    async () => {
      const dir = writableDir();
      const log = path.join(dir, 'search.jsonl');
      const config = temporal.config({
        servers: {
          find: stdio(
            'search',
            { OZ0_RECEIVED_LOG: log, SEARCH_STALL_AT: '1', SEARCH_SEEN: path.join(dir, 'seen.json') },
            true,
          ),
        },
        // Long enough for the second attempt to start a fresh sandboxed Python on a loaded machine (seconds).
        tools: { 'find.search': { timeoutSeconds: 8, maxAttempts: 2 } },
      });
      const { trace } = await runJob(temporal, config, {
        tenant: 'acme',
        steps: [{ call: 'find.search', args: { q: 'oz0', shards: 3, shard_ms: 50 } }],
      });
      const events = readReceived(log);
      const [first, second] = events.filter((r) => r.tool === 'search' && r.event === undefined);
      const exit = events.find((r) => r.event === 'exit' && r.instance === first.instance)!;
      expect(second.instance).not.toBe(first.instance);
      expect(second.t as number).toBeGreaterThanOrEqual(exit.t as number);
      // A sandboxed server takes no resume token (P3): the second attempt starts over.
      expect(second.from).toBe(0);
      expect(callsOf(trace)[0].attempts.map((a) => [a.outcome, a.note])).toEqual([
        ['timeout', expect.stringContaining('time limit')],
        ['ok', 'started over: only a remote server resumes'],
      ]);
    },
  );

  withPython(
    'K1/B1/B2 on a plugin Python server: a busy charge is made again after its wait under the same key, and charges once',
    async () => {
      const log = path.join(tmpDir(), 'ledger.jsonl');
      const env = { OZ0_RECEIVED_LOG: log, LEDGER_FILE: path.join(tmpDir(), 'ledger.db'), LEDGER_BUSY_FIRST: '1' };
      const config = temporal.config({ servers: { ledger: stdio('ledger', env) } });
      const { trace, handle } = await runJob(temporal, config, {
        tenant: 'acme',
        steps: [{ call: 'ledger.charge', args: { order_id: 'o-py', amount: 700 } }],
      });
      const received = readReceived(log).filter((r) => r.tool === 'charge');
      const key = `${handle.workflowId}/c1`;
      expect(received.map((r) => [r.key, r.event])).toEqual([
        [key, undefined],
        [key, 'busy'],
        [key, undefined],
      ]);
      expect(callsOf(trace)[0].attempts.map((a) => a.outcome)).toEqual(['busy', 'ok']);
      expect(callsOf(trace)[0].protocol).toBe(protocol);
      expect(callsOf(trace)[0].result.structuredContent).toEqual({ charge_id: 'ch-1', order_id: 'o-py', amount: 700 });
    },
  );

  describe('remote Python servers (Streamable HTTP)', () => {
    let search: PythonHttp | undefined;
    let shop: PythonHttp | undefined;
    const log = path.join(tmpDir(), 'remote.jsonl');
    beforeAll(async () => {
      if (!python) return;
      search = await servePythonHttp('search', { OZ0_RECEIVED_LOG: log, SEARCH_STALL_AT: '2' });
      shop = await servePythonHttp('bookshop', { OZ0_RECEIVED_LOG: log });
    });
    afterAll(async () => {
      await search?.close();
      await shop?.close();
    });

    withPython(
      'P3/P5: a Python search that stalled after 2 of 4 shards is resumed from its ProgressNotification token, and redoes no shard',
      async () => {
        const config = temporal.config({
          servers: { web: { url: search!.url, protocol } },
          tools: { 'web.search': { timeoutSeconds: 4, maxAttempts: 2 } },
        });
        const tenant = uniqueId('t');
        const { trace, handle } = await runJob(
          temporal,
          config,
          { tenant, steps: [{ call: 'web.search', args: { q: 'resume', shards: 4, shard_ms: 100 } }] },
          uniqueId('py'),
          () => approve(temporal, config, tenant, 'web'),
        );
        const key = `${handle.workflowId}/c1`;
        const mine = readReceived(log).filter((r) => r.key === key);
        const requests = mine.filter((r) => r.event === undefined);
        expect(requests.map((r) => [r.from, r.resume])).toEqual([
          [0, null],
          [2, { token: 'shard:2', progress: 2 }],
        ]);
        expect(mine.filter((r) => r.event === 'work').map((r) => r.shard)).toEqual([0, 1, 2, 3]);
        // The Python SDK answers a cancelled request with -32800 over HTTP: expected traffic, not a warning (issue 19.4).
        expect(fs.readFileSync(logFileOf(expect.getState().testPath!), 'utf8')).not.toContain('unknown message ID');
        expect((callsOf(trace)[0] as JobTrace['steps'][number] & { attempts: unknown[] }).attempts).toEqual([
          {
            attempt: 1,
            outcome: 'timeout',
            note: expect.stringContaining('time limit'),
            progress: { progress: 2, total: 4 },
          },
          { attempt: 2, outcome: 'ok', note: 'resumed from progress 2 of 4', progress: { progress: 4, total: 4 } },
        ]);
      },
    );

    withPython(
      'C2 over Streamable HTTP: a cancelled job reaches the Python handler, whose shielded cleanup runs',
      async () => {
        expect(await cancelMidOrder(shop!.url, protocol, log)).toEqual(['hold', 'cancelled', 'released']);
      },
    );
  });

  withPython(
    'oz0 plugin test --drill on the Python ledger: every case of every keyed write passes (same key, cancel, restart, new key, other arguments)',
    async () => {
      const dir = tmpDir();
      const configFile = path.join(dir, 'oz0.config.json');
      const env = { LEDGER_FILE: path.join(dir, 'ledger.db'), OZ0_RECEIVED_LOG: path.join(dir, 'received.jsonl') };
      fs.writeFileSync(configFile, JSON.stringify({ servers: { pyledger: stdio('ledger', env) } }));
      const drillFile = pythonExample('ledger').replace(/\.py$/, '.drill.json');
      const { code, report } = await pluginTestCli(configFile, 'pyledger', '--drill', '--drill-file', drillFile);
      expect(report.findings).toEqual([]);
      expect(report.drill!.functions.map((f) => f.function).sort()).toEqual([
        'charge',
        'refund',
        'set_status',
        'slow_charge',
      ]);
      expect(report.drill).toMatchObject({ passed: 20, failed: 0, skipped: 0 });
      expect(code).toBe(0);
      // The server's own log: the cancelled slow_charge was cancelled in the Python handler, and charged nothing then.
      const received = readReceived(env.OZ0_RECEIVED_LOG);
      expect(received.some((r) => r.tool === 'slow_charge' && r.event === 'cancelled')).toBe(true);
    },
  );
});

/**
 * Which of the Python SDK's Streamable HTTP modes a cancel from oz0 reaches (the second seed's warning, measured):
 * each serves the seed's Bookshop, and a job is cancelled while its order_book holds a copy.
 */
withPython.each([
  // 2026-07-28: the call's stream closed is its cancel, and a JSON answer's stream is not watched.
  ['2026-07-28', 'sse', 'stateless', 'cancelled'],
  ['2026-07-28', 'json', 'stateless', 'ordered'],
  // 2025-11-25: notifications/cancelled reaches the session that runs the call; a stateless server has none.
  ['2025-11-25', 'json', 'stateful', 'cancelled'],
  ['2025-11-25', 'sse', 'stateless', 'ordered'],
] as const)(
  'C2 on the Python SDK over Streamable HTTP, %s, %s responses, %s: order_book records `%s`',
  async (revision, responses, state, outcome) => {
    const log = path.join(tmpDir(), 'bookshop-modes.jsonl');
    const shop = await startListening(python!, [fixture('bookshop_modes.py'), responses, state], {
      OZ0_RECEIVED_LOG: log,
      BOOKSHOP_PAY_SECONDS: '3',
    });
    try {
      // On the server's side: the handler was cancelled, or it ran on to its end (3 s) unaware.
      expect(await cancelMidOrder(shop.url, revision, log)).toEqual(['hold', outcome, 'released']);
    } finally {
      await shop.close();
    }
  },
);
