/**
 * `npm run demo` fails loudly (issue 32.2): the demo, run as a user runs it (its own dev server, node, example servers
 * and agents), exits 0 when every step of its job ended as it expects, and 1 naming the step that did not — here a
 * server whose script is not there — though the job itself still COMPLETED.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT, tmpDir } from '../helpers/temporal';

interface DemoRun {
  code: number;
  stdout: string;
  /** The demo's own lines on stderr (the node's JSON log lines left out). */
  said: string[];
}

/** `node dist/examples/demo.js`, in a state folder of its own and on free ports. */
function demo(...args: string[]): Promise<DemoRun> {
  const state = tmpDir('oz0-demo-');
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [path.join(ROOT, 'dist', 'examples', 'demo.js'), '--port', '0', '--state', state, ...args],
      { cwd: ROOT, timeout: 240_000, maxBuffer: 16 * 1024 * 1024 },
      (err, stdout, stderr) =>
        resolve({
          code: err ? ((err as { code?: number }).code ?? 1) : 0,
          stdout,
          said: stderr.split('\n').filter((line) => line && !line.startsWith('{')),
        }),
    );
  });
}

/**
 * The repository's oz0.config.json in a folder of its own, with its relative paths made absolute (they are resolved
 * against the config's folder), and `change` applied to it.
 */
function configCopy(change: (config: { servers: Record<string, Record<string, unknown>> }) => void): string {
  const config = JSON.parse(fs.readFileSync(path.join(ROOT, 'oz0.config.json'), 'utf8'));
  const inRepo = (p: string) => (fs.existsSync(path.join(ROOT, p)) ? path.join(ROOT, p) : p);
  for (const launch of [...Object.values(config.servers), ...Object.values(config.harnesses)] as Array<{
    command?: string;
    args: string[];
    sandbox?: { read?: string[] };
  }>) {
    // A remote server (url) has no command to find.
    if (launch.command === undefined) continue;
    launch.command = inRepo(launch.command);
    launch.args = launch.args.map(inRepo);
    if (launch.sandbox?.read) launch.sandbox.read = launch.sandbox.read.map(inRepo);
  }
  change(config);
  const file = path.join(tmpDir('oz0-demo-config-'), 'oz0.config.json');
  fs.writeFileSync(file, JSON.stringify(config, null, 2));
  return file;
}

test('issue 32.2 (control): the demo on the repository’s config exits 0, every step as it expects', async () => {
  const run = await demo();
  expect(run.said.filter((line) => line.startsWith('demo failed'))).toEqual([]);
  expect(run.said).toContain('demo: every step ended as the demo expects');
  expect(run.stdout).toMatch(/^job \S+: COMPLETED/);
  // R1-R2: the ticket desk, behind the authorization server the demo ran, answered acme's job as acme's own OAuth
  // client and beta's as beta's, each opening a ticket on its own desk (a step-up for the write scope).
  expect(
    run.said.some((line) => /^demo: the ticket desk http:\/\/127\.0\.0\.1:\d+\/mcp takes tokens of/.test(line)),
  ).toBe(true);
  expect(run.stdout).toMatch(/tickets\.whoami .* 1:ok +acme-desk \(/);
  expect(run.stdout).toMatch(/tickets\.open_ticket .* 1:ok +opened: acme-desk-1 /);
  expect(run.stdout).toMatch(/beta's job \S+:\n/);
  expect(run.stdout).toMatch(/tickets\.whoami .* 1:ok +beta-desk \(/);
  expect(run.stdout).toMatch(/tickets\.open_ticket .* 1:ok +opened: beta-desk-1 /);
  expect(run.code).toBe(0);
}, 300_000);

test('issue 32.2: a server that cannot start makes the demo exit 1 naming its step and why, though the job COMPLETED', async () => {
  const config = configCopy((c) => {
    c.servers.reader.args = [path.join(ROOT, 'dist', 'examples', 'no-such-reader.js')];
  });
  const run = await demo('--config', config);
  expect(run.stdout).toMatch(/^job \S+: COMPLETED/);
  const failed = run.said.filter((line) => line.startsWith('demo failed: '));
  expect(failed[0]).toMatch(
    /^demo failed: step 3 reader\.read_pages: expected ok, got failed: .*server "reader" cannot start: its script \S*no-such-reader\.js is not there/,
  );
  // The agent's calls on the same server are named too, each saying why (not only "Activity task failed"); the steps on
  // other servers are not.
  expect(
    failed.some((line) =>
      /step \d+ reader\.echo in session s2 \(harness refunds\): .*server "reader" cannot start: its script \S*no-such-reader\.js is not there/.test(
        line,
      ),
    ),
  ).toBe(true);
  expect(failed.some((line) => /ledger\.|search\.|notes\./.test(line))).toBe(false);
  expect(run.said).not.toContain('demo: every step ended as the demo expects');
  expect(run.code).toBe(1);
}, 300_000);

test('issue 32.2: a config without a server the demo’s job calls is refused before anything starts, naming the field', async () => {
  const config = configCopy((c) => {
    delete c.servers.notes;
  });
  const run = await demo('--config', config);
  expect(run.said).toEqual([`demo: ${config}: servers.notes: the demo's job calls it`]);
  expect(run.code).toBe(1);
});
