/**
 * Chaos: many trials of a node lost (kill -9 of the node and its servers, at a random moment) while jobs
 * make key-honouring writes — plain calls and harness sessions — with a fresh node started each time.
 * Prints the counts that matter: jobs finished, jobs lost, and writes per key (exactly one for each).
 *
 *   npm run chaos -- [--trials 10] [--jobs 3]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import type { ChildProcess } from 'node:child_process';
import { startDevServer } from '../worker/dev-server';
import { projectRoot } from '../worker/paths';
import { findTemporalCli } from '../worker/temporal-cli';
import type { JobSpec, JobTrace } from '../workflows/definitions';
import { killTree, startWorker } from './processes';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

async function main(): Promise<void> {
  const trials = arg('trials', 10);
  const jobsPerTrial = arg('jobs', 3);
  const root = projectRoot();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-chaos-'));
  const ledger = path.join(dir, 'ledger.jsonl');
  const server = await startDevServer({ cli: findTemporalCli(), uiPort: false });
  const taskQueue = 'oz0-chaos';
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(
    file,
    JSON.stringify({
      temporal: { address: server.address, taskQueue },
      servers: {
        ledger: {
          command: 'node',
          args: [path.join(root, 'dist', 'examples', 'ledger.js')],
          env: { LEDGER_FILE: ledger },
        },
      },
      tools: { '*': { timeoutSeconds: 30, maxAttempts: 5 } },
      node: { heartbeatTimeoutSeconds: 4, stateDir: path.join(dir, 'state') },
    }),
  );
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection });
  const workers: ChildProcess[] = [];
  const counts = { trials, jobs: 0, finished: 0, failed: 0, lost: 0, nodesKilled: 0 };
  const expectedKeys = new Set<string>();
  let spare = 0;
  const fresh = async () => (await startWorker(file, `chaos-${++spare}`, workers)).proc;
  let nodes = [await fresh(), await fresh()];
  try {
    for (let t = 0; t < trials; t++) {
      const handles = await Promise.all(
        Array.from({ length: jobsPerTrial }, (_, j) => {
          const order = `t${t}-j${j}`;
          const charge = (i: number) => ({
            call: 'ledger.slow_charge',
            args: { order_id: `${order}-${i}`, amount: i + 1, ms: 200 + Math.floor(Math.random() * 500) },
          });
          // Half the jobs make plain calls, half a harness session.
          const spec: JobSpec = {
            tenant: 'chaos',
            steps: j % 2 ? [charge(0), charge(1), charge(2)] : [{ session: [charge(0), charge(1), charge(2)] }],
          };
          return client.workflow.start('job', {
            taskQueue,
            workflowId: `chaos-${process.pid}-${t}-${j}`,
            args: [spec],
          });
        }),
      );
      counts.jobs += handles.length;
      await new Promise((r) => setTimeout(r, 200 + Math.random() * 1500));
      const victim = nodes[Math.floor(Math.random() * nodes.length)];
      killTree(victim.pid!);
      counts.nodesKilled++;
      nodes = [...nodes.filter((n) => n !== victim), await fresh()];
      for (const h of handles) {
        try {
          const trace = (await Promise.race([
            h.result(),
            new Promise((_, reject) => setTimeout(() => reject(new Error('lost')), 120_000)),
          ])) as JobTrace;
          counts.finished++;
          for (const s of trace.steps) if (!s.result.isError) expectedKeys.add(s.key);
        } catch (err) {
          if ((err as Error).message === 'lost') counts.lost++;
          else counts.failed++;
        }
      }
    }
  } finally {
    for (const w of workers) if (w.exitCode === null) killTree(w.pid!);
    await connection.close();
    await server.stop();
  }
  const perKey = new Map<string, number>();
  for (const line of fs.readFileSync(ledger, 'utf8').trim().split('\n').filter(Boolean)) {
    const { key } = JSON.parse(line) as { key: string };
    perKey.set(key, (perKey.get(key) ?? 0) + 1);
  }
  const twice = [...perKey.values()].filter((n) => n > 1).length;
  const missing = [...expectedKeys].filter((k) => !perKey.has(k)).length;
  process.stdout.write(
    `${JSON.stringify({ ...counts, keysWritten: perKey.size, keysWrittenTwice: twice, answeredButNotWritten: missing })}\n`,
  );
  if (twice > 0 || counts.lost > 0 || missing > 0) process.exitCode = 1;
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
