/**
 * The CLI's start (issue 32): `oz0 --help`; `oz0 job status` with no Temporal server listening (a refused address,
 * said at once) and against this run's dev server (a job it does not know: the client loaded, connected, asked);
 * each against a bare `node -e 0`. Per process: wall time from spawn to exit, and its peak resident memory (maxRSS,
 * which the process writes at exit: `bench/rss-at-exit.ts`, preloaded into every one, the bare one too). The four
 * are run in turn, a round at a time, so the machine's noise falls on all of them.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { freePort } from '../../worker/dev-server';
import { fixed, spread } from '../common';
import type { Row, Spread } from '../common';
import type { BenchEnv } from '../env';

export interface CliOptions {
  rounds: number;
}

interface Run {
  ms: number;
  rssMiB: number;
  code: number | null;
}

const PRELOAD = path.join(__dirname, '..', 'rss-at-exit.js');

/** One process: `node -r rss-at-exit ARGS`, from `root`; its wall time, peak memory and exit code. */
function run(root: string, args: string[], env: NodeJS.ProcessEnv, rssFile: string): Promise<Run> {
  const t = performance.now();
  const child = spawn(process.execPath, ['-r', PRELOAD, ...args], {
    cwd: root,
    env: { ...process.env, ...env, OZ0_BENCH_RSS: rssFile },
    stdio: 'ignore',
  });
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('exit', (code) => {
      const ms = performance.now() - t;
      resolve({ ms, rssMiB: Number(fs.readFileSync(rssFile, 'utf8')) / 1024, code });
    });
  });
}

export async function measureCli(env: Pick<BenchEnv, 'root' | 'dir' | 'server'>, opts: CliOptions) {
  const oz0 = path.join(env.root, 'bin', 'oz0');
  // A port nothing listens on: taken and let go.
  const refused = `127.0.0.1:${await freePort()}`;
  const cases = [
    { name: 'node -e 0', args: ['-e', '0'], env: {}, code: 0 },
    { name: 'oz0 --help', args: [oz0, '--help'], env: {}, code: 0 },
    {
      name: 'oz0 job status X, refused',
      args: [oz0, 'job', 'status', 'X'],
      env: { TEMPORAL_ADDRESS: refused },
      code: 1,
    },
    {
      name: 'oz0 job status X, dev server',
      args: [oz0, 'job', 'status', 'X'],
      env: { TEMPORAL_ADDRESS: env.server.address },
      code: 1,
    },
  ];
  const runs = cases.map(() => [] as Run[]);
  const rssFile = path.join(env.dir, 'cli-rss');
  // The first round warms the page cache.
  for (let round = -1; round < opts.rounds; round++) {
    for (const [i, c] of cases.entries()) {
      const r = await run(env.root, c.args, c.env, rssFile);
      if (r.code !== c.code) throw new Error(`bench: ${c.name} exited ${r.code}, not ${c.code}`);
      if (round >= 0) runs[i].push(r);
    }
  }
  const stats = runs.map((rs) => ({ ms: spread(rs.map((r) => r.ms)), rssMiB: spread(rs.map((r) => r.rssMiB)) }));
  const [bare] = stats;
  const figure = (s: { ms: Spread; rssMiB: Spread }) =>
    `${fixed(s.ms.p50, 0)} ms (${fixed(s.ms.p50 / bare.ms.p50, 1)} × bare, max ${fixed(s.ms.max, 0)}), ` +
    `${fixed(s.rssMiB.p50, 0)} MiB (+${fixed(s.rssMiB.p50 - bare.rssMiB.p50, 0)})`;
  const rows: Row[] = [
    {
      measure: `(CLI) node -e 0, p50 of ${opts.rounds}: wall time, peak memory`,
      figure: `${fixed(bare.ms.p50, 0)} ms (max ${fixed(bare.ms.max, 0)}), ${fixed(bare.rssMiB.p50, 0)} MiB`,
    },
    { measure: '(CLI) oz0 --help', figure: figure(stats[1]) },
    {
      measure: '(CLI) oz0 job status X, nothing listening: the refusal said',
      target: '≤ 2 s',
      figure: figure(stats[2]),
      met: stats[2].ms.max <= 2000,
    },
    { measure: "(CLI) oz0 job status X on the run's dev server (no such job)", figure: figure(stats[3]) },
  ];
  return { rows, data: Object.fromEntries(cases.map((c, i) => [c.name, stats[i]])) };
}
