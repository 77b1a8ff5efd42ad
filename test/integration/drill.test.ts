/**
 * `oz0 plugin test SERVER [--drill]` as a user runs it (`./bin/oz0`, a config file, real stdio servers; no Temporal):
 * the example ledger passes every case of the drill, plugin and sandboxed; each broken fixture fails the case that
 * is about its fault, and only that one; a listing's inconsistencies and a sample's bad progress are reported.
 */
import fs from 'node:fs';
import path from 'node:path';
import { readReceived } from '../../examples/common';
import { startLedgerServer } from '../../examples/ledger';
import { startSearchServer } from '../../examples/search';
import { readKeyStore } from '../../plugin';
import { DRILL_CANCEL_REASON } from '../../plugin/drill/drill';
import type { PluginTestReport } from '../../plugin/drill/report';
import { ROOT, example, fixture, tmpDir } from '../helpers/temporal';
import { NODE_PROGRAM, writableDir } from '../helpers/sandbox';
import { oz0, pluginTestCli } from '../helpers/cli';

jest.setTimeout(90_000);

const dir = tmpDir('oz0-drill-');
const configFile = path.join(dir, 'oz0.config.json');
const ledgerFile = path.join(dir, 'ledger.db');
const boxDir = writableDir('oz0-drill-box-');
const sandboxLedger = path.join(boxDir, 'sandbox-ledger.db');
const received = path.join(dir, 'received.jsonl');
const bank = (name: string) => ({
  command: 'node',
  args: [fixture(`broken/${name}.js`)],
  env: { BANK_FILE: path.join(dir, `${name}.bank`), KEYS_FILE: path.join(dir, `${name}.keys`) },
});

beforeAll(() => {
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      servers: {
        ledger: {
          command: 'node',
          args: [example('ledger')],
          env: { LEDGER_FILE: ledgerFile, OZ0_RECEIVED_LOG: received },
        },
        boxed: {
          command: 'node',
          args: [example('ledger')],
          sandbox: { read: NODE_PROGRAM.map((p) => path.join(ROOT, p)), write: [boxDir] },
          env: { LEDGER_FILE: sandboxLedger },
        },
        ignores: bank('ignores-key'),
        memory: bank('memory-keys'),
        byargs: bank('dedupes-by-args'),
        takes: bank('takes-other-args'),
        races: bank('races-a-cancel'),
        bad: { command: 'node', args: [fixture('broken/bad-listing.js')] },
      },
    }),
  );
  // The default drill file, beside the config: the broken fixtures' one `charge`.
  fs.writeFileSync(
    path.join(dir, 'oz0.drill.json'),
    JSON.stringify({
      functions: {
        charge: {
          args: { order_id: 'o-1', amount: 5 },
          otherArgs: { order_id: 'o-1', amount: 6 },
          cancelArgs: { order_id: 'o-1', amount: 5, ms: 500 },
          count: { function: 'count_charges', path: 'charges' },
        },
      },
    }),
  );
  fs.writeFileSync(path.join(dir, 'bad.drill.json'), JSON.stringify({ samples: { resumes_badly: {} } }));
});

function pluginTest(server: string, ...more: string[]): Promise<{ code: number; report: PluginTestReport }> {
  return pluginTestCli(configFile, server, ...more);
}

/** Each case's result for one function: `{ 'same-key': 'pass', … }`. */
function results(report: PluginTestReport, fn = 'charge'): Record<string, string> {
  const found = report.drill?.functions.find((f) => f.function === fn);
  return Object.fromEntries((found?.cases ?? []).map((c) => [c.case, c.result]));
}

function note(report: PluginTestReport, which: string, fn = 'charge'): string {
  return report.drill?.functions.find((f) => f.function === fn)?.cases.find((c) => c.case === which)?.note ?? '';
}

const allPass = { 'same-key': 'pass', cancelled: 'pass', restart: 'pass', 'new-key': 'pass', 'other-args': 'pass' };

test('CLI plugin test --drill: the example ledger passes every case, and wrote each drill key once', async () => {
  const { code, report } = await pluginTest('ledger', '--drill', '--drill-file', 'examples/ledger.drill.json');
  expect(report.findings).toEqual([]);
  for (const fn of ['charge', 'refund', 'set_status', 'slow_charge']) expect(results(report, fn)).toEqual(allPass);
  expect(report.drill).toMatchObject({ failed: 0, skipped: 0, passed: 20 });
  expect(code).toBe(0);
  // What the ledger did: one line per drill key (the repeats were answered from the store), across the restart.
  const byKey = new Map<string, number>();
  for (const r of readKeyStore(ledgerFile)) byKey.set(r.key, (byKey.get(r.key) ?? 0) + 1);
  const drillKeys = [...byKey.keys()].filter((k) => k.startsWith('oz0-drill/'));
  expect(drillKeys.length).toBe(4 * 4);
  expect([...byKey.values()].every((n) => n === 1)).toBe(true);
  expect(drillKeys.every((k) => /^oz0-drill\/[0-9a-f-]{36}\/(same-key|cancelled|new-key|other-args)$/.test(k))).toBe(
    true,
  );
  // The cancel reached slow_charge mid-sleep, with the drill's reason, and its repeat charged once.
  expect(readReceived(received).find((r) => r.event === 'cancelled' && r.tool === 'slow_charge')).toMatchObject({
    reason: DRILL_CANCEL_REASON,
  });
  expect(note(report, 'cancelled', 'slow_charge')).toMatch(/cancelled after \d+ ms; it had not taken effect/);
  // Two server processes: the restart killed the first.
  const pids = new Set(readReceived(received).map((r) => r.pid));
  expect(pids.size).toBe(2);
});

test('CLI plugin test --drill: the ledger as a sandboxed server passes too (its store outside its folder)', async () => {
  const { code, report } = await pluginTest('boxed', '--drill', '--drill-file', 'examples/ledger.drill.json');
  expect(report.kind).toBe('sandbox');
  // I6, I8: how it runs here is said: which bubblewrap, its version, where it came from, how its limits are held.
  expect(report.isolation).toMatch(/^bubblewrap \d+\.\d+\.\d+ at \/\S+ \(.+\), limits by /);
  expect(results(report, 'slow_charge')).toEqual(allPass);
  expect(code).toBe(0);
});

test('I6: with node.isolation "none", oz0 plugin test says a sandboxed server runs unisolated', async () => {
  const config = JSON.parse(fs.readFileSync(configFile, 'utf8')) as { servers: Record<string, unknown> };
  const unisolated = path.join(dir, 'unisolated.config.json');
  fs.writeFileSync(
    unisolated,
    JSON.stringify({ servers: { boxed: config.servers.boxed }, node: { isolation: 'none' } }),
  );
  const { report } = await pluginTestCli(unisolated, 'boxed');
  expect(report.isolation).toMatch(/^none: runs unisolated/);
  const text = await oz0(['plugin', 'test', 'boxed', '--config', unisolated]);
  expect(text.stdout).toContain('isolation: none: runs unisolated');
});

test('CLI plugin test --drill: a server that ignores the key fails same-key, restart and other-args', async () => {
  const { code, report } = await pluginTest('ignores', '--drill');
  expect(results(report)).toEqual({ ...allPass, 'same-key': 'fail', restart: 'fail', 'other-args': 'fail' });
  expect(note(report, 'same-key')).toContain('the count rose by 2 across two calls under one key');
  expect(code).toBe(1);
  const lines = fs.readFileSync(path.join(dir, 'ignores-key.bank'), 'utf8').trim().split('\n');
  expect(lines.filter((l) => l.includes('/same-key')).length).toBeGreaterThan(1);
});

test('CLI plugin test --drill: a server that keeps its keys only in memory fails restart, and only that', async () => {
  const { code, report } = await pluginTest('memory', '--drill');
  expect(results(report)).toEqual({ ...allPass, restart: 'fail' });
  expect(note(report, 'restart')).toMatch(
    /after a restart the key answers .*ch-\d+.*, not .*ch-1.*keys kept in memory/,
  );
  expect(code).toBe(1);
});

test('CLI plugin test --drill: a server that dedupes by arguments fails new-key, and only that', async () => {
  const { code, report } = await pluginTest('byargs', '--drill');
  expect(results(report)).toEqual({ ...allPass, 'new-key': 'fail' });
  expect(note(report, 'new-key')).toContain('it dedupes by arguments, not by key');
  expect(code).toBe(1);
});

test('CLI plugin test --drill: a server that takes a used key with other arguments fails other-args, and only that', async () => {
  const { code, report } = await pluginTest('takes', '--drill');
  expect(results(report)).toEqual({ ...allPass, 'other-args': 'fail' });
  expect(note(report, 'other-args')).toContain('took a used key with other arguments');
  expect(code).toBe(1);
});

test('CLI plugin test --drill: a server whose cancelled write races its repeat fails cancelled, and only that', async () => {
  const { code, report } = await pluginTest('races', '--drill');
  expect(results(report)).toEqual({ ...allPass, cancelled: 'fail' });
  expect(note(report, 'cancelled')).toContain('the write was done more than once');
  expect(code).toBe(1);
});

test('CLI plugin test: a listing’s inconsistencies and a sample’s bad progress are found; exit 1 on an error', async () => {
  const { code, report } = await pluginTest('bad', '--drill-file', path.join(dir, 'bad.drill.json'));
  expect(report.findings.map((f) => [f.function, f.severity, f.check])).toEqual([
    ['keyed_without_hint', 'warning', 'key-without-idempotent'],
    ['key_not_true', 'error', 'key-not-true'],
    ['no_hints', 'warning', 'write-without-hints'],
    ['resumes_badly', 'warning', 'resume-not-remote'],
    ['resumes_badly', 'error', 'progress-not-increasing'],
    ['resumes_badly', 'error', 'token-invalid'],
  ]);
  expect(report.samples[0]).toMatchObject({ function: 'resumes_badly', progress: [{ progress: 1 }, {}, {}] });
  expect(report.ok).toBe(false);
  expect(code).toBe(1);
  // The table, for a person.
  const table = await oz0(['plugin', 'test', 'bad', '--config', configFile]);
  expect(table.code).toBe(1);
  expect(table.stdout).toMatch(/^error\s+key_not_true\s+key-not-true\s+_meta\["oz0\/idempotency_key"\] is "yes"/m);
});

test('CLI plugin test: a remote server: the drill skips only restart; a resuming sample is called again from its token (P3)', async () => {
  const ledger = await startLedgerServer(0, { file: path.join(dir, 'remote-ledger.db') });
  const search = await startSearchServer(0);
  try {
    const remoteConfig = path.join(dir, 'remote.config.json');
    fs.writeFileSync(
      remoteConfig,
      JSON.stringify({ servers: { ledger: { url: ledger.url }, search: { url: search.url } } }),
    );
    const drilled = await oz0([
      'plugin',
      'test',
      'ledger',
      '--drill',
      '--drill-file',
      'examples/ledger.drill.json',
      '--json',
      '--config',
      remoteConfig,
    ]);
    const report = JSON.parse(drilled.stdout) as PluginTestReport;
    expect(report.kind).toBe('remote');
    expect(results(report)).toEqual({ ...allPass, restart: 'skip' });
    expect(drilled.code).toBe(0);

    const samples = path.join(dir, 'search.drill.json');
    fs.writeFileSync(samples, JSON.stringify({ samples: { search: { args: { q: 'x', shards: 3, shard_ms: 10 } } } }));
    const sampled = await oz0([
      'plugin',
      'test',
      'search',
      '--drill-file',
      samples,
      '--json',
      '--config',
      remoteConfig,
    ]);
    const sample = JSON.parse(sampled.stdout) as PluginTestReport;
    expect(sample.findings).toEqual([]);
    expect(sample.samples).toEqual([
      {
        function: 'search',
        answer: 'searched 3 shards for "x"',
        progress: [1, 2, 3].map((n) => ({ progress: n, total: 3, token: `shard:${n}` })),
        resumed: 'searched 3 shards for "x"',
      },
    ]);
    expect(sampled.code).toBe(0);
  } finally {
    await Promise.all([ledger.close(), search.close()]);
  }
});

test('CLI plugin test: --help, and bad input refused with exit 2', async () => {
  const help = await oz0(['plugin', 'test', '--help']);
  expect(help.code).toBe(0);
  expect(help.stdout).toContain('--drill-file <file>');
  const noServer = await oz0(['plugin', 'test', 'nosuch', '--config', configFile]);
  expect(noServer).toMatchObject({ code: 2, stderr: expect.stringContaining('no server named "nosuch"') });
  const none = path.join(dir, 'none.json');
  const noDrillFile = await oz0(['plugin', 'test', 'bad', '--drill', '--drill-file', none, '--config', configFile]);
  expect(noDrillFile).toMatchObject({ code: 2, stderr: expect.stringContaining('cannot read the drill file') });
  const badDrill = path.join(dir, 'broken.drill.json');
  fs.writeFileSync(badDrill, JSON.stringify({ functions: { charge: { args: 'o-1' } } }));
  const refused = await oz0(['plugin', 'test', 'bad', '--drill-file', badDrill, '--config', configFile]);
  expect(refused).toMatchObject({ code: 2, stderr: expect.stringContaining('functions.charge.args') });
});
