/**
 * Cancel-to-notification latency (p50/p99 over many cancels, stdio and Streamable HTTP) and kill-switch
 * fan-out (one switch, many running calls), measured on a real dev server with the example reader's `sleep`.
 * The clock on both ends is this machine's: the time from the cancel request (or the switch) to the server
 * recording notifications/cancelled. Prints a table and writes JSON to bench/results/.
 *
 *   npm run bench:cancel -- [--cancels 100] [--calls 100] [--tenants 20]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { readReceived, serveHttp } from '../examples/common';
import { createReader } from '../examples/reader';
import { approveListing, readListing } from '../client/approve';
import { changePolicy } from '../client/policy';
import { parseConfig } from '../worker/config';
import type { LoadedConfig } from '../worker/config';
import { startDevServer } from '../worker/dev-server';
import { createLogger } from '../worker/logger';
import { createNode } from '../worker/node';
import { projectRoot } from '../worker/paths';
import { findTemporalCli } from '../worker/temporal-cli';
import { killUpdate } from '../workflows/policy';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

function percentile(values: number[], p: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
}

async function until<T>(check: () => T | undefined, timeoutMs: number): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error('bench: timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
}

async function main(): Promise<void> {
  const cancels = arg('cancels', 100);
  const calls = arg('calls', 100);
  const tenants = arg('tenants', 20);
  const root = projectRoot();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-bench-'));
  const log = path.join(dir, 'received.jsonl');
  process.env.OZ0_RECEIVED_LOG = log;
  const logger = createLogger({ level: 'warn' });
  const server = await startDevServer({ cli: findTemporalCli(), uiPort: false });
  const http = await serveHttp(createReader({ stateFile: path.join(dir, 'seen.json') }), 0);
  const reader = path.join(root, 'dist', 'examples', 'reader.js');
  const config: LoadedConfig = {
    ...parseConfig({
      temporal: { address: server.address, taskQueue: 'oz0-bench' },
      servers: {
        stdio: {
          command: 'node',
          args: [reader],
          env: { OZ0_RECEIVED_LOG: log, READER_STATE: path.join(dir, 's.json') },
        },
        http: { url: http.url },
      },
      node: { slots: Math.max(200, calls * 2), stateDir: path.join(dir, 'state') },
    }),
    baseDir: root,
    source: 'bench',
  };
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection });
  const target = { client, taskQueue: config.temporal.taskQueue, seeds: {} };
  const node = await createNode({ config, logger });
  const running = node.run();
  const results: Record<string, unknown> = {};
  try {
    await approveListing(target, 'bench', await readListing(config, logger, 'http'));
    let n = 0;
    const startSleep = (tool: string, tenant = 'bench') =>
      client.workflow.start('job', {
        taskQueue: config.temporal.taskQueue,
        workflowId: `bench-${process.pid}-${++n}`,
        args: [{ tenant, steps: [{ call: tool, args: { ms: 120_000 } }] }],
      });
    const received = () => readReceived(log);
    const keyOf = (id: string) => `${id}/c1`;

    for (const transport of ['stdio', 'http']) {
      const latencies: number[] = [];
      for (let done = 0; done < cancels; done += 10) {
        const batch = await Promise.all(
          Array.from({ length: Math.min(10, cancels - done) }, () => startSleep(`${transport}.sleep`)),
        );
        await until(() => {
          const started = new Set(
            received()
              .filter((r) => r.event === 'start')
              .map((r) => r.key),
          );
          return batch.every((h) => started.has(keyOf(h.workflowId))) ? true : undefined;
        }, 30_000);
        const asked = new Map<string, number>();
        await Promise.all(
          batch.map(async (h) => {
            asked.set(keyOf(h.workflowId), Date.now());
            await h.cancel();
          }),
        );
        const seen = await until(() => {
          const c = received().filter((r) => r.event === 'cancelled' && asked.has(r.key as string));
          return c.length === batch.length ? c : undefined;
        }, 30_000);
        for (const c of seen) latencies.push((c.t as number) - asked.get(c.key as string)!);
        await Promise.all(batch.map((h) => h.result().catch(() => undefined)));
      }
      results[`cancel_${transport}`] = summary(latencies);
    }

    // Kill-switch fan-out: `calls` running calls over `tenants` tenants, one switch for every tenant.
    const jobs = await Promise.all(
      Array.from({ length: calls }, (_, i) => startSleep('stdio.sleep', `bench-t${i % tenants}`)),
    );
    await until(() => {
      const started = new Set(
        received()
          .filter((r) => r.event === 'start')
          .map((r) => r.key),
      );
      return jobs.every((h) => started.has(keyOf(h.workflowId))) ? true : undefined;
    }, 60_000);
    const thrownAt = Date.now();
    await changePolicy(target, '*', killUpdate, ['stdio.sleep']);
    const keys = new Set(jobs.map((h) => keyOf(h.workflowId)));
    const killed = await until(() => {
      const c = received().filter((r) => r.event === 'cancelled' && keys.has(r.key as string));
      return c.length === calls ? c : undefined;
    }, 30_000);
    results.kill_fanout = summary(killed.map((c) => (c.t as number) - thrownAt));
    await Promise.all(jobs.map((h) => h.result().catch(() => undefined)));
  } finally {
    await node.shutdown();
    await running;
    await connection.close();
    await http.close();
    await server.stop();
  }
  const machine = {
    cpus: os.cpus().length,
    cpu: os.cpus()[0]?.model,
    memGiB: Math.round(os.totalmem() / 2 ** 30),
    node: process.version,
    platform: `${os.platform()} ${os.release()}`,
  };
  const out = { when: new Date().toISOString(), machine, cancels, calls, tenants, results };
  process.stdout.write(`machine: ${JSON.stringify(machine)}\n`);
  process.stdout.write(
    `${'measure'.padEnd(16)}${'n'.padStart(6)}${'p50 ms'.padStart(10)}${'p99 ms'.padStart(10)}${'max ms'.padStart(10)}\n`,
  );
  for (const [name, s] of Object.entries(results) as [string, ReturnType<typeof summary>][]) {
    process.stdout.write(
      `${name.padEnd(16)}${String(s.n).padStart(6)}${String(s.p50).padStart(10)}${String(s.p99).padStart(10)}${String(s.max).padStart(10)}\n`,
    );
  }
  const resultsDir = path.join(root, 'bench', 'results');
  fs.mkdirSync(resultsDir, { recursive: true });
  fs.writeFileSync(
    path.join(resultsDir, `cancel-${out.when.replace(/[:.]/g, '-')}.json`),
    `${JSON.stringify(out, null, 2)}\n`,
  );
}

function summary(values: number[]) {
  return { n: values.length, p50: percentile(values, 50), p99: percentile(values, 99), max: Math.max(...values) };
}

main().catch((err) => {
  createLogger().error(err);
  process.exit(1);
});
