/**
 * O5: what metrics and tracing cost a call. Two `oz0 worker` processes on one dev server, the same config but their
 * own task queues: one with both on (`OZ0_METRICS_PORT`, scraped every second as Prometheus would, and
 * `OTEL_EXPORTER_OTLP_ENDPOINT` to an OTLP/HTTP endpoint of this run that takes every export and drops it), one with
 * both off. Jobs of sequential echo calls alternate between them, round by round, so both see the same machine.
 * Processes, not nodes in this one: tracing is once per process.
 */
import type { ChildProcess } from 'node:child_process';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { killTree, startWorker } from '../../worker/processes';
import { freePort } from '../../worker/dev-server';
import { fixed, mean } from '../common';
import type { Row } from '../common';
import { echoSteps, writeBenchConfig } from '../env';
import type { BenchEnv } from '../env';

export interface ObservabilityOptions {
  calls: number;
  rounds: number;
}

/** An OTLP/HTTP endpoint that accepts every export (200) and keeps nothing but a count of its bytes. */
export async function otlpSink(): Promise<{ url: string; bytes: () => number; close(): Promise<void> }> {
  let bytes = 0;
  const server = http.createServer((req, res) => {
    req.on('data', (c: Buffer) => (bytes += c.length));
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    bytes: () => bytes,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

export async function measureObservability(env: BenchEnv, opts: ObservabilityOptions) {
  const sink = await otlpSink();
  const port = await freePort();
  const workers: ChildProcess[] = [];
  const perCall: Record<'on' | 'off', number[]> = { on: [], off: [] };
  let scrapes = 0;
  let scraper: NodeJS.Timeout | undefined;
  try {
    const start = async (name: 'on' | 'off', extra: Record<string, string>) => {
      const taskQueue = `oz0-obs-${name}`;
      const file = writeBenchConfig(env, taskQueue, { jobs: { continueAsNewAfterCalls: 10_000 } });
      await startWorker(file, `bench-obs-${name}`, workers, { env: { OZ0_LOG_LEVEL: 'warn', ...extra } });
      return taskQueue;
    };
    const on = await start('on', {
      OZ0_METRICS_PORT: String(port),
      OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
      OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    });
    const off = await start('off', {});
    scraper = setInterval(() => {
      fetch(`http://127.0.0.1:${port}/metrics`)
        .then((r) => r.text())
        .then(() => scrapes++)
        .catch(() => undefined);
    }, 1000);
    const steps = echoSteps(opts.calls);
    const job = async (taskQueue: string, n: number) =>
      (
        await env.client.workflow.start('job', {
          taskQueue,
          workflowId: env.id(`obs-${taskQueue}`),
          args: [{ tenant: 'bench', steps: steps.slice(0, n) }],
        })
      ).result();
    // Warm both: bundles, server processes, the SDK's exporter.
    await job(on, 10);
    await job(off, 10);
    for (let r = 0; r < opts.rounds; r++) {
      // Alternating which goes first, so neither always runs on a machine the other just warmed.
      const order: Array<['on' | 'off', string]> =
        r % 2 === 0
          ? [
              ['on', on],
              ['off', off],
            ]
          : [
              ['off', off],
              ['on', on],
            ];
      for (const [name, queue] of order) {
        const t = performance.now();
        await job(queue, opts.calls);
        perCall[name].push((performance.now() - t) / opts.calls);
      }
    }
  } finally {
    clearInterval(scraper);
    for (const w of workers) if (w.pid) killTree(w.pid);
    await sink.close();
  }
  const onMs = mean(perCall.on);
  const offMs = mean(perCall.off);
  const ratio = onMs / offMs;
  const rows: Row[] = [
    {
      measure: '(O5) one call: metrics and tracing on / both off',
      figure: `${fixed(ratio, 3)} (${fixed(onMs, 2)} / ${fixed(offMs, 2)} ms; ${scrapes} scrapes, ${fixed(sink.bytes() / 1024)} KiB of spans)`,
      target: '≤ 1.03',
      met: ratio <= 1.03,
    },
  ];
  return { rows, data: { ...opts, msPerCall: perCall, on: onMs, off: offMs, ratio, scrapes, spanBytes: sink.bytes() } };
}
