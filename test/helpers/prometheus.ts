/**
 * A real Prometheus (Debian's `prometheus` package) for the tests of O1: it scrapes nodes' `/metrics` every second,
 * on 127.0.0.1, with its data in a fresh folder, and answers PromQL through its HTTP API.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { z } from 'zod';
import { freePort } from '../../worker/dev-server';
import { eventually, tmpDir } from './temporal';

export interface Prometheus {
  url: string;
  /** An instant query's result: one entry a series, its labels and its value. */
  query(expr: string): Promise<Array<{ metric: Record<string, string>; value: number }>>;
  stop(): Promise<void>;
}

const QueryAnswer = z.object({
  status: z.literal('success'),
  data: z.object({
    resultType: z.literal('vector'),
    result: z.array(z.object({ metric: z.record(z.string(), z.string()), value: z.tuple([z.number(), z.string()]) })),
  }),
});

/**
 * A scrape's text without the `release` and `build_id` labels every series of a node carries (issue 56), which
 * prom-client puts after a counter's own labels and before a histogram's: the tests of other rules match series by
 * their own labels alone.
 */
export function withoutReleaseLabels(text: string): string {
  return text
    .replace(/,?\b(?:release|build_id)="[^"]*"/g, '')
    .replace(/\{,/g, '{')
    .replace(/\{\}/g, '');
}

/** Where Debian's prometheus is, or why there is none. */
export function findPrometheus(): { path: string } | { why: string } {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    const file = path.join(dir, 'prometheus');
    if (dir && fs.existsSync(file)) return { path: file };
  }
  return { why: 'no prometheus on PATH: apt-get install prometheus (Debian), as .ci/run does' };
}

/** Starts Prometheus scraping `targets` (host:port) under job `oz0`, every second. */
export async function startPrometheus(bin: string, targets: string[]): Promise<Prometheus> {
  const dir = tmpDir('oz0-prometheus-');
  const port = await freePort();
  const config = [
    'global: { scrape_interval: 1s, evaluation_interval: 1s }',
    'scrape_configs:',
    '  - job_name: oz0',
    `    static_configs: [ { targets: [${targets.map((t) => `"${t}"`).join(', ')}] } ]`,
  ].join('\n');
  fs.writeFileSync(path.join(dir, 'prometheus.yml'), config);
  const log = fs.openSync(path.join(dir, 'prometheus.log'), 'a');
  const proc: ChildProcess = spawn(
    bin,
    [
      `--config.file=${path.join(dir, 'prometheus.yml')}`,
      `--storage.tsdb.path=${path.join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
    ],
    { stdio: ['ignore', log, log] },
  );
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const url = `http://127.0.0.1:${port}`;
  await eventually(
    async () => ((await fetch(`${url}/-/ready`).catch(() => undefined))?.ok ? true : undefined),
    30_000,
    'Prometheus ready',
  );
  return {
    url,
    async query(expr) {
      const res = await fetch(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`);
      const answer = QueryAnswer.parse(await res.json());
      return answer.data.result.map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
    },
    async stop() {
      proc.kill('SIGTERM');
      await exited;
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}
