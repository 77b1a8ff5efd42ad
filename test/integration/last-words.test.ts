/**
 * Failures say why (STYLE; issue 32.5, 32.6). A server that dies at start or in the middle of a call — a plugin's
 * shared one or a job's sandboxed one — is reported with how it ended and its last lines on stderr, bounded and with
 * its secrets cut out: in the attempt's note, the error result, a warning in the node's log and `oz0 plugin test`,
 * never only as "Connection closed". And a server that could not start is never remembered as an older one: once
 * fixed, it speaks 2026-07-28. Read from the servers' side too: how many times each started, and what it was sent.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import type { JobSpec } from '../../model/schemas';
import type { LoadedConfig } from '../../common/config';
import { callsOf } from '../../model/job';
import type { StepTrace } from '../../model/job';
import { createNode } from '../../worker/node';
import { logFileOf } from '../logs';
import { oz0, pluginTestCli } from '../helpers/cli';
import { python, withPython } from '../helpers/python';
import { sandboxed, writableDir } from '../helpers/sandbox';
import { fixture, logger, runJob, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';

const temporal = useTemporal();

interface Dies {
  at?: 'start' | 'call';
  words?: string[];
  code?: number;
  flood?: number;
  unless?: string;
  /** Dies at start only on its first this many starts. */
  times?: number;
  env?: Record<string, string>;
  sandbox?: boolean;
}

/** The dying server (test/fixtures/last-words.js), a plugin's or sandboxed, and the file it notes what it did in. */
function dies(opts: Dies) {
  const dir = writableDir('oz0-last-words-');
  const log = path.join(dir, 'server.jsonl');
  const server = {
    command: 'node',
    args: [fixture('last-words.js')],
    env: {
      DIE_AT: opts.at ?? 'start',
      DIE_WORDS: JSON.stringify(opts.words ?? []),
      DIE_CODE: String(opts.code ?? 1),
      DIE_FLOOD: String(opts.flood ?? 0),
      DIE_LOG: log,
      ...(opts.unless && { DIE_UNLESS: opts.unless }),
      ...(opts.times !== undefined && { DIE_TIMES: String(opts.times) }),
      ...opts.env,
    },
    // I2: its log's folder, and the folder of the file that fixes it, are granted.
    ...(opts.sandbox && {
      sandbox: sandboxed({ write: [dir], ...(opts.unless && { read: [path.dirname(opts.unless)] }) }),
    }),
  };
  return { server, log };
}

/** What the server noted: its starts, the messages its processes read, and what it said on stderr. */
function seen(log: string) {
  const records = readReceived(log);
  return {
    starts: records.filter((r) => r.event === 'process start').length,
    received: records.filter((r) => r.event === 'received').map((r) => r.method as string),
    keys: records.filter((r) => r.method === 'tools/call').map((r) => r.key),
    said: records.filter((r) => r.event === 'said').flatMap((r) => r.words as string[]),
  };
}

/** The node's log, this test file's. */
const nodeLog = () => fs.readFileSync(logFileOf(expect.getState().testPath!), 'utf8');

const WARN = 40;
/** I12: what a failure of a shared server says of its stderr, and the node's warning that has it. */
const IN_LOG = "its last words on stderr are in the node's log (a shared server's, never quoted)";
const SHARED_WORDS = "a shared server's last words (its failure names the node's log, never quotes them to a tenant)";

/** The node's warnings (and worse) that hold `text`, parsed. */
function warnings(text: string): Array<Record<string, unknown>> {
  return nodeLog()
    .split('\n')
    .filter((line) => line.startsWith('{') && line.includes(text))
    .map((line) => JSON.parse(line) as Record<string, unknown>)
    .filter((line) => (line.level as number) >= WARN);
}
const resultText = (step: StepTrace) => (step.result.content[0] as { text: string }).text;
const oneAttempt = { '*': { maxAttempts: 1 } };

function job(config: LoadedConfig, spec: JobSpec) {
  return runJob(temporal, config, spec).then(({ trace }) => callsOf(trace));
}

/** One job of acme calling `box.hello` on a node already running: its call's step. */
async function helloOn(config: LoadedConfig) {
  const handle = await temporal.client.workflow.start('job', {
    taskQueue: config.temporal.taskQueue,
    workflowId: uniqueId('hello'),
    args: [{ tenant: 'acme', steps: [{ call: 'box.hello' }] }],
  });
  return callsOf(await handle.result())[0];
}

describe.each([
  ['plugin', false],
  ['sandboxed', true],
] as const)('a %s server', (_kind, sandbox) => {
  test('STYLE "Failures say why": one that writes to stderr and exits 1 at start ends its call with its last words, in the note, the error result and a warning', async () => {
    const said = uniqueId('cannot open /etc/box.conf');
    const { server, log } = dies({ words: ['box 1.0 starting', `fatal: ${said}`], sandbox });
    const config = temporal.config({ servers: { box: server }, tools: oneAttempt });
    const [step] = await job(config, { tenant: 'acme', steps: [{ call: 'box.hello' }] });
    const words = `the server exited with code 1; its last words on stderr: box 1.0 starting | fatal: ${said}`;
    // I12 (issue 55.8): a shared server that took no call has no tenant's words to tell: its own are quoted.
    const why = `could not start server "box": Connection closed; ${words}`;
    expect(step.attempts).toEqual([{ attempt: 1, outcome: 'failed', note: `the server was not reachable: ${why}` }]);
    expect(step.result.isError).toBe(true);
    expect(resultText(step)).toContain(why);
    expect(warnings(said)).toEqual([expect.objectContaining({ msg: 'a server could not start', err: why })]);
    // On its side: it died before it read a byte, and was started twice more — asked server/discover again (it may
    // have failed its start), then for the handshake (it might be an older server that exits on server/discover) —
    // never asked anything.
    expect(seen(log)).toMatchObject({ starts: 3, received: [] });
  });

  test('STYLE "Failures say why": one that dies mid-call after writing to stderr ends the attempt with its last words', async () => {
    const said = uniqueId('disk full');
    const { server, log } = dies({ at: 'call', words: ['writing the report', `panic: ${said}`], code: 3, sandbox });
    const config = temporal.config({ servers: { box: server }, tools: oneAttempt });
    const [step] = await job(config, { tenant: 'acme', steps: [{ call: 'box.die' }] });
    const words = `the server exited with code 3; its last words on stderr: writing the report | panic: ${said}`;
    const why = `Connection closed; ${sandbox ? words : `the server exited with code 3; ${IN_LOG}`}`;
    expect(step.attempts).toEqual([{ attempt: 1, outcome: 'failed', note: `outcome unknown: ${why}` }]);
    expect(resultText(step)).toBe(`oz0: the call failed: box.die: ${why}`);
    if (sandbox) expect(warnings(said)).toEqual([expect.objectContaining({ msg: 'attempt failed', err: why })]);
    else expect(warnings(said)).toEqual([expect.objectContaining({ msg: SHARED_WORDS, lastWords: words })]);
    // On its side: the call reached it, under the step's key, before it died.
    expect(seen(log).keys).toEqual([step.key]);
  });

  test('32.6: a server that could not start is not remembered as an older one: fixed, it speaks 2026-07-28 on the same node', async () => {
    const fixedBy = path.join(writableDir('oz0-fix-'), 'fixed');
    const { server, log } = dies({ words: ['missing its config'], unless: fixedBy, sandbox });
    const config = temporal.config({ servers: { box: server }, tools: oneAttempt });
    const node = await createNode({ config, logger });
    const [before, after] = await node.runUntil(async () => {
      const run = () => helloOn(config);
      const first = await run();
      const failed = seen(log);
      fs.writeFileSync(fixedBy, '');
      return [{ step: first, seen: failed }, { step: await run() }];
    });
    expect(before.step.result.isError).toBe(true);
    expect(before.step.attempts[0].note).toContain('its last words on stderr: missing its config');
    expect(before.seen).toMatchObject({ starts: 3, received: [] });
    // The fixed server was asked server/discover again, and answered it: no initialize handshake.
    expect(after.step).toMatchObject({ protocol: '2026-07-28', result: { isError: false } });
    const { starts, received } = seen(log);
    expect(starts).toBe(4);
    expect(received[0]).toBe('server/discover');
    expect(received).toContain('tools/call');
    expect(received).not.toContain('initialize');
  });

  test('S3 (issue 45.3): a server that failed its first start and speaks both revisions is started again with server/discover, answers it, and is remembered as 2026-07-28 — never asked initialize', async () => {
    const { server, log } = dies({ words: ['warming up: cache not ready'], times: 1, sandbox });
    const config = temporal.config({ servers: { box: server }, tools: oneAttempt });
    const node = await createNode({ config, logger });
    const steps = await node.runUntil(async () => [await helloOn(config), await helloOn(config)]);
    for (const step of steps) expect(step).toMatchObject({ protocol: '2026-07-28', result: { isError: false } });
    const { starts, received } = seen(log);
    // Died once, then asked server/discover and answered it; the next job's process was not asked again.
    expect(received.filter((m) => m === 'server/discover')).toHaveLength(1);
    expect(received).not.toContain('initialize');
    expect(starts).toBeGreaterThanOrEqual(2);
  });
});

test('STYLE "Failures say why": a server whose stderr holds a secret (from the node’s environment) is quoted with it cut out, everywhere — a sandboxed one, and a plugin that took no call (issue 55.8)', async () => {
  const secret = `sk-${uniqueId('live')}`;
  process.env.OZ0_TEST_LAST_WORDS_KEY = secret;
  const keyed = (sandbox: boolean) =>
    dies({
      words: ['connecting with key $KEY', 'refused: bad key $KEY'],
      env: { API_KEY: 'env:OZ0_TEST_LAST_WORDS_KEY' },
      sandbox,
    });
  // A job's own server, and a shared one that died before any call: neither has a tenant's words to keep.
  const [own, shared] = [keyed(true), keyed(false)];
  const config = temporal.config({ servers: { box: own.server, plug: shared.server }, tools: oneAttempt });
  const { trace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'box.hello' }, { call: 'plug.hello' }],
  });
  for (const step of callsOf(trace))
    expect(step.attempts[0].note).toContain(
      'its last words on stderr: connecting with key [redacted] | refused: bad key [redacted]',
    );
  expect(JSON.stringify(trace)).not.toContain(secret);
  expect(nodeLog()).toContain('connecting with key [redacted]');
  expect(nodeLog()).not.toContain(secret);
  // The control: each server did write the key on its stderr, at each of its three starts (the probe, asked again,
  // the handshake).
  for (const { log } of [own, shared])
    expect(seen(log)).toMatchObject({
      starts: 3,
      said: [1, 2, 3].flatMap(() => [`connecting with key ${secret}`, `refused: bad key ${secret}`]),
    });
});

test('STYLE "Failures say why": a huge stderr is quoted to its last lines, each cut short; the node goes on', async () => {
  const { server, log } = dies({ flood: 8 * 1024 * 1024, words: ['final: out of disk'], sandbox: true });
  const fixedBy = path.join(writableDir('oz0-fix-'), 'fixed');
  fs.writeFileSync(fixedBy, '');
  const healthy = dies({ unless: fixedBy }).server;
  const config = temporal.config({ servers: { box: server, ok: healthy }, tools: oneAttempt });
  const [flooded, after] = await job(config, { tenant: 'acme', steps: [{ call: 'box.hello' }, { call: 'ok.hello' }] });
  const note = flooded.attempts[0].note!;
  // Its last lines that fit in 4,000 characters, each cut to 1,000: the noise's last, the one long line, its words.
  const quote = note.slice(note.indexOf('its last words on stderr: ') + 'its last words on stderr: '.length);
  expect(quote).toMatch(/^(noise n{993}… \| )+x{999}… \| final: out of disk$/);
  expect(quote.length).toBeLessThanOrEqual(4000);
  expect(resultText(flooded).length).toBeLessThan(4500);
  expect(after).toMatchObject({ result: { isError: false, content: [{ type: 'text', text: 'hello' }] } });
  expect(seen(log).starts).toBe(3);
});

withPython(
  'STYLE "Failures say why": a sandboxed Python server whose module is missing says so: the traceback’s last lines',
  async () => {
    const dir = writableDir('oz0-last-words-py-');
    const log = path.join(dir, 'server.jsonl');
    const script = path.join(tmpDir(), 'server.py');
    fs.writeFileSync(
      script,
      [
        'import json, os',
        "open(os.environ['DIE_LOG'], 'a').write(json.dumps({'event': 'process start'}) + '\\n')",
        'import oz0_no_such_module',
      ].join('\n'),
    );
    const config = temporal.config({
      servers: { box: { command: python!, args: [script], env: { DIE_LOG: log }, sandbox: { write: [dir] } } },
      tools: oneAttempt,
    });
    const [step] = await job(config, { tenant: 'acme', steps: [{ call: 'box.hello' }] });
    const note = step.attempts[0].note!;
    expect(note).toMatch(/^the server was not reachable: could not start server "box": Connection closed; /);
    expect(note).toContain(
      'the server exited with code 1; its last words on stderr: Traceback (most recent call last):',
    );
    expect(note).toMatch(
      /import oz0_no_such_module \| ModuleNotFoundError: No module named 'oz0_no_such_module' \(hint: a sandbox sees only the system’s folders, its program and its grants: grant the folder its packages are in \(sandbox.read: its node_modules, its virtualenv\)\)$/,
    );
    expect(resultText(step)).toContain("ModuleNotFoundError: No module named 'oz0_no_such_module'");
    expect(seen(log).starts).toBe(3);
  },
);

test('S2 (issue 45.2): a sandboxed Node.js server whose package is not granted says which package — the crash’s 4th line of 14, quoted before its last lines — and what to grant', async () => {
  const dir = tmpDir('oz0-no-modules-');
  const script = path.join(dir, 'server.mjs');
  fs.writeFileSync(script, "import { McpServer } from '@modelcontextprotocol/server';\nconsole.log(McpServer);\n");
  const config = temporal.config({
    servers: { fs: { command: 'node', args: [script], sandbox: sandboxed() } },
    tools: oneAttempt,
  });
  const [step] = await job(config, { tenant: 'acme', steps: [{ call: 'fs.read' }] });
  const note = step.attempts[0].note!;
  expect(note).toContain(
    "its last words on stderr: Error [ERR_MODULE_NOT_FOUND]: Cannot find package '@modelcontextprotocol/server' imported from",
  );
  expect(note).toContain(' | … | ');
  expect(note).toMatch(
    /Node\.js v\d+\.\d+\.\d+ \(hint: a sandbox sees only the system’s folders, its program and its grants: grant the folder its packages are in/,
  );
});

test('S2 (issue 45.2c): a start that can only fail the same way — a grant that is not there, a script that is not there — costs one attempt of three, saying so; a server that dies at start is tried again (the control)', async () => {
  const { server: dying, log } = dies({ words: ['flaky start'], sandbox: true });
  const config = temporal.config({
    servers: {
      nogrant: {
        command: 'node',
        args: [fixture('last-words.js')],
        sandbox: sandboxed({ read: ['/nonexistent/oz0-grant'] }),
      },
      noscript: { command: 'node', args: [path.join(tmpDir(), 'gone.js')] },
      dying,
    },
    tools: { '*': { maxAttempts: 3 } },
  });
  const steps = callsOf(
    (
      await runJob(temporal, config, {
        tenant: 'acme',
        steps: [{ call: 'nogrant.hello' }, { call: 'noscript.hello' }, { call: 'dying.hello' }],
      })
    ).trace,
  );
  const [nogrant, noscript, flaky] = steps;
  for (const step of [nogrant, noscript]) {
    expect(step.attempts).toHaveLength(1);
    expect(step.attempts[0]).toMatchObject({
      outcome: 'failed',
      note: expect.stringMatching(
        /; not tried again: it would fail the same way until its config or the node changes$/,
      ),
    });
  }
  expect(nogrant.attempts[0].note).toContain('/nonexistent/oz0-grant does not exist');
  expect(noscript.attempts[0].note).toContain('gone.js');
  // The control: a server that died at start may start next time, and is tried again.
  expect(flaky.attempts).toHaveLength(3);
  expect(seen(log).starts).toBe(9);
});

test('S2 (issue 45.2b): a server that never answers says how long the node waited, that it was still running and that it wrote nothing', async () => {
  const config = temporal.config({
    servers: {
      mute: { command: 'node', args: ['-e', 'setInterval(() => {}, 1000)'], protocol: '2025-11-25' },
    },
    tools: oneAttempt,
  });
  const [step] = await job(config, { tenant: 'acme', steps: [{ call: 'mute.hello' }] });
  expect(step.attempts[0].note).toMatch(
    /^the server was not reachable: could not start server "mute": .*; the server did not answer initialize in (29|3\d) s, and was still running when the node gave up; it wrote nothing on stderr$/,
  );
}, 90_000);

test("I12: a shared plugin's last words never reach a tenant: beta's failed call does not quote acme's argument from its stderr, the node's log has it; a job's own sandboxed server's words are quoted to it (the control)", async () => {
  const card = uniqueId('acme-card');
  const shared = dies({ at: 'call', words: ['bad input: exiting'] }).server;
  const own = dies({ at: 'call', words: ['bad input: exiting'], sandbox: true }).server;
  const config = temporal.config({ servers: { plug: shared, box: own }, tools: oneAttempt });
  const node = await createNode({ config, logger });
  const [beta, control] = await node.runUntil(async () => {
    const run = async (tenant: string, steps: JobSpec['steps']) => {
      const handle = await temporal.client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: uniqueId(tenant),
        args: [{ tenant, steps }],
      });
      return callsOf(await handle.result());
    };
    // acme's call leaves its argument on the shared plugin's stderr; beta's call then crashes it.
    await run('acme', [{ call: 'plug.note', args: { text: card } }]);
    const [died] = await run('beta', [{ call: 'plug.die' }]);
    // The control: a job's own sandboxed server, its own words then its crash.
    const mine = uniqueId('own-words');
    const steps = await run('gamma', [{ call: 'box.note', args: { text: mine } }, { call: 'box.die' }]);
    return [died, { step: steps[1], mine }];
  });
  expect(beta.result.isError).toBe(true);
  expect(JSON.stringify(beta)).not.toContain(card);
  expect(resultText(beta)).toContain(`the server exited with code 1; ${IN_LOG}`);
  // The operator's log has them: the plugin's last words, acme's argument among them.
  expect(warnings(card)).toContainEqual(
    expect.objectContaining({ msg: SHARED_WORDS, lastWords: expect.stringContaining(`note {"text":"${card}"}`) }),
  );
  expect(resultText(control.step)).toContain(
    `its last words on stderr: note {"text":"${control.mine}"} | bad input: exiting`,
  );
});

describe('oz0 plugin test', () => {
  const dir = writableDir('oz0-last-words-cli-');
  const configFile = path.join(dir, 'oz0.config.json');
  const drillFile = path.join(dir, 'die.drill.json');
  beforeAll(() => {
    const atStart = dies({ words: ['box 1.0 starting', 'fatal: no such table: orders'] }).server;
    const midCall = dies({ at: 'call', words: ['panic: index out of range'], code: 3 }).server;
    fs.writeFileSync(configFile, JSON.stringify({ servers: { box: atStart, mid: midCall } }));
    fs.writeFileSync(drillFile, JSON.stringify({ samples: { die: {} } }));
  });

  test('STYLE "Failures say why": says what a server that dies at start said', async () => {
    const out = await oz0(['plugin', 'test', 'box', '--config', configFile]);
    expect(out.code).toBe(1);
    expect(out.stderr).toContain(
      'oz0: could not start server "box": Connection closed; the server exited with code 1; its last words on stderr: box 1.0 starting | fatal: no such table: orders',
    );
  });

  test('STYLE "Failures say why": says what a server that dies in a sample call said', async () => {
    const { code, report } = await pluginTestCli(configFile, 'mid', '--drill-file', drillFile);
    expect(code).toBe(1);
    expect(report.findings).toContainEqual({
      severity: 'error',
      function: 'die',
      check: 'sample-error',
      message:
        'the sample call got no answer: Connection closed; the server exited with code 3; its last words on stderr: panic: index out of range',
    });
  });
});
