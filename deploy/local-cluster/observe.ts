/**
 * `npm run cluster -- --observe`: Jaeger (built from its Go module, ./jaeger.ts) receiving the nodes' spans over OTLP,
 * and Debian's Prometheus scraping every node's /metrics (SPEC O1-O2). Each node gets a metrics port of its own and
 * the OTLP endpoint in its environment; Prometheus finds the nodes in a targets file it re-reads (file_sd).
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { freePort } from '../../worker/dev-server';
import { ensureJaeger, startJaeger } from './jaeger';

export interface Observability {
  /** Jaeger's query API (the binary built from its Go module has no web UI). */
  jaegerUrl: string;
  prometheusUrl: string;
  /** What a node's environment gets: its own metrics port, and where its spans go. */
  nodeEnv(): Promise<Record<string, string>>;
  stop(): Promise<void>;
}

function started(bin: string, args: string[], logFile: string): { proc: ChildProcess; stop(): Promise<void> } {
  const log = fs.openSync(logFile, 'a');
  const proc = spawn(bin, args, { stdio: ['ignore', log, log], detached: true });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  return {
    proc,
    async stop() {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
      await exited;
    },
  };
}

async function ready(url: string, what: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if ((await fetch(url).catch(() => undefined))?.ok) return;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`${what} did not answer ${url} within ${timeoutMs / 1000} s`);
}

function findPrometheus(): string {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    if (dir && fs.existsSync(path.join(dir, 'prometheus'))) return path.join(dir, 'prometheus');
  }
  throw new Error('no prometheus on PATH: apt-get install prometheus (Debian)');
}

export async function startObservability(opts: {
  root: string;
  stateDir: string;
  logsDir: string;
  say: (line: string) => void;
}): Promise<Observability> {
  const jaegerBin = await ensureJaeger(opts.root, opts.say);
  const prometheusBin = findPrometheus();
  const jaeger = await startJaeger(jaegerBin, path.join(opts.stateDir, 'jaeger'));
  const stops = [() => jaeger.stop()];
  try {
    const dir = path.join(opts.stateDir, 'prometheus');
    fs.mkdirSync(dir, { recursive: true });
    const targetsFile = path.join(dir, 'nodes.json');
    const targets: string[] = [];
    const writeTargets = () => fs.writeFileSync(targetsFile, JSON.stringify([{ targets, labels: { job: 'oz0' } }]));
    writeTargets();
    fs.writeFileSync(
      path.join(dir, 'prometheus.yml'),
      [
        'global: { scrape_interval: 5s, evaluation_interval: 5s }',
        'scrape_configs:',
        '  - job_name: oz0',
        `    file_sd_configs: [ { files: ["${targetsFile}"], refresh_interval: 5s } ]`,
      ].join('\n'),
    );
    const port = await freePort();
    const prometheus = started(
      prometheusBin,
      [
        `--config.file=${path.join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${path.join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
      ],
      path.join(opts.logsDir, 'prometheus.log'),
    );
    stops.push(() => prometheus.stop());
    const prometheusUrl = `http://127.0.0.1:${port}`;
    await ready(`${prometheusUrl}/-/ready`, 'Prometheus');
    return {
      jaegerUrl: jaeger.queryUrl,
      prometheusUrl,
      async nodeEnv() {
        const metrics = await freePort();
        targets.push(`127.0.0.1:${metrics}`);
        writeTargets();
        return { OZ0_METRICS_PORT: String(metrics), OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.otlpHttp };
      },
      async stop() {
        for (const stop of stops.reverse()) await stop();
      },
    };
  } catch (err) {
    for (const stop of stops.reverse()) await stop();
    throw err;
  }
}
