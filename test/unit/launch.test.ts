/**
 * Config: a copied oz0.config.json starts its servers and harnesses from paths relative to its own folder, and a
 * missing command or script is named with the server or harness it belongs to.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { besideConfig, launchProblem, launchProblems } from '../../activities/launch';
import { runHarness } from '../../activities/harness/run';
import { CancelRoute } from '../../activities/heartbeats';
import { createLogger } from '../../common/logger';
import type { HarnessOutcome } from '../../model/activities';
import { loadConfig } from '../../common/config';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-launch-'));
const file = path.join(dir, 'oz0.config.json');
fs.mkdirSync(path.join(dir, 'servers'));
fs.mkdirSync(path.join(dir, 'bin'));
fs.writeFileSync(path.join(dir, 'servers', 'ledger.js'), '');
fs.writeFileSync(path.join(dir, 'bin', 'search'), '#!/bin/sh\n', { mode: 0o755 });
fs.writeFileSync(path.join(dir, 'bin', 'not-executable'), '');
fs.writeFileSync(
  file,
  JSON.stringify({
    servers: {
      ledger: { command: 'node', args: ['servers/ledger.js', '--verbose'] },
      search: { command: './bin/search', args: ['--root', 'servers'], sandbox: true },
      gone: { command: 'node', args: ['dist/examples/ledger.js'] },
      plain: { command: 'bin/not-executable' },
      nowhere: { command: 'no-such-command-oz0' },
      remote: { url: 'http://127.0.0.1:1/mcp' },
    },
    harnesses: { refunds: { command: 'node', args: ['agents/refunds.js'], tools: ['ledger.*'] } },
  }),
);
// Loaded from elsewhere: the working directory plays no part.
const config = loadConfig({ file, cwd: os.tmpdir() });

test('Config: relative paths of a copied config resolve against its folder, not the working directory', () => {
  expect(config.baseDir).toBe(dir);
  expect(besideConfig(config.baseDir, config.servers.ledger as never)).toEqual({
    command: 'node',
    args: [path.join(dir, 'servers', 'ledger.js'), '--verbose'],
  });
  // A command with a slash in it, and an argument naming a folder there: a sandbox runs in a folder of its own.
  expect(besideConfig(config.baseDir, config.servers.search as never)).toEqual({
    command: path.join(dir, 'bin', 'search'),
    args: ['--root', path.join(dir, 'servers')],
  });
});

test.each([
  ['ledger', undefined],
  ['search', undefined],
  [
    'gone',
    `server "gone" cannot start: its script dist/examples/ledger.js is not there (looked for ${dir}/dist/examples/ledger.js; relative paths in ${file} are resolved against its folder, ${dir})`,
  ],
  [
    'plain',
    `server "plain" cannot start: its command ${dir}/bin/not-executable is not an executable file (relative paths in ${file} are resolved against its folder, ${dir})`,
  ],
  ['nowhere', 'server "nowhere" cannot start: its command "no-such-command-oz0" is not on the PATH'],
])('Config: server %s starts, or says what is missing', (name, problem) => {
  const server = config.servers[name] as { command: string; args: string[] };
  expect(launchProblem(`server "${name}"`, config, besideConfig(config.baseDir, server))).toBe(problem);
});

test('Config: a node lists at start every server and harness that cannot start, by name', () => {
  const problems = launchProblems(config);
  expect(problems.map((p) => p.slice(0, p.indexOf(' cannot start')))).toEqual([
    'server "gone"',
    'server "plain"',
    'server "nowhere"',
    'harness "refunds"',
  ]);
  expect(problems[3]).toContain(`its script agents/refunds.js is not there (looked for ${dir}/agents/refunds.js`);
});

test('H1/H7: a harness whose script is missing ends its session with an error result that names it, starting nothing', async () => {
  const outcome: HarnessOutcome = await new MockActivityEnvironment().run(
    runHarness,
    // Nothing else is reached: the gateway is never opened, no folder is made.
    {
      config,
      gateway: undefined as never,
      isolation: undefined as never,
      logger: createLogger({ level: 'silent' }),
      route: new CancelRoute(200),
      killGraceMs: 100,
      sessionRoot: path.join(dir, 'sessions'),
      harnesses: undefined as never,
    },
    { jobId: 'j', tenant: 'acme', harness: 'refunds', session: 's1', sessionRun: 1, input: null },
  );
  expect(outcome.ended).toBe('could not start');
  expect(outcome.result.isError).toBe(true);
  expect(outcome.result.content).toEqual([
    {
      type: 'text',
      text: `oz0: harness "refunds" cannot start: its script agents/refunds.js is not there (looked for ${dir}/agents/refunds.js; relative paths in ${file} are resolved against its folder, ${dir})`,
    },
  ]);
  expect(fs.existsSync(path.join(dir, 'sessions'))).toBe(false);
});
