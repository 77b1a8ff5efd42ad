/**
 * The short check CI runs on the local cluster (`npm run cluster -- --check`): one job whose harness session
 * writes to the ledger through two nodes, the node running the session killed (kill -9 of it and its servers)
 * after the session's first write, then the counts: the job finished, the fresh session ran on the other node,
 * and every key is in the ledger exactly once.
 */
import fs from 'node:fs';
import { Client, Connection } from '@temporalio/client';
import { readReceived } from '../../examples/common';
import { readKeyStore } from '../../plugin';
import { descendants, killTree } from '../../worker/processes';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import type { LocalCluster } from './index';

export interface CheckCounts {
  jobsFinished: number;
  jobsLost: number;
  killedNode: string;
  keys: number;
  keysWrittenTwice: number;
  answeredButMissing: number;
  sessionRuns: number[];
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function until<T>(what: string, check: () => T | undefined, ms: number): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`check: timed out waiting for ${what}`);
    await sleep(100);
  }
}

export async function runCheck(cluster: LocalCluster, say: (line: string) => void): Promise<CheckCounts> {
  if (cluster.nodes.length < 2) throw new Error('check: needs two nodes');
  const connection = await Connection.connect({ address: cluster.address });
  const client = new Client({ connection, namespace: cluster.namespace });
  const jobId = `check-${Date.now().toString(36)}`;
  const charge = (i: number) => ({
    call: 'ledger.slow_charge',
    args: { order_id: `${jobId}-${i}`, amount: i + 1, ms: 1500 },
  });
  const spec: JobSpec = { tenant: 'acme', steps: [{ session: [0, 1, 2, 3].map(charge) }] };
  try {
    const config = JSON.parse(fs.readFileSync(cluster.configFile, 'utf8')) as { temporal: { taskQueue: string } };
    const handle = await client.workflow.start('job', {
      taskQueue: config.temporal.taskQueue,
      workflowId: jobId,
      args: [spec],
    });
    say(`check: job ${jobId} started, a session of 4 slow charges`);
    // The session's node: the one whose ledger process answered the session's first call.
    const first = await until(
      'the session to write once',
      () =>
        readReceived(cluster.receivedLog).find(
          (r) => typeof r.key === 'string' && r.key.startsWith(`${jobId}/s1/`) && r.event === 'answered',
        ),
      60_000,
    );
    const victim = cluster.nodes.find((n) => descendants(n.proc.pid!).includes(first.pid as number));
    if (!victim) throw new Error('check: no node runs the session');
    killTree(victim.proc.pid!);
    say(`check: killed ${victim.name} (kill -9) in the middle of the session`);
    let timer: NodeJS.Timeout | undefined;
    const trace = await Promise.race([
      handle.result() as Promise<JobTrace>,
      new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), 180_000))),
    ]).finally(() => clearTimeout(timer));
    const perKey = new Map<string, number>();
    for (const entry of readKeyStore(cluster.ledgerFile)) {
      if (entry.key.startsWith(`${jobId}/`)) perKey.set(entry.key, (perKey.get(entry.key) ?? 0) + 1);
    }
    const calls = trace ? callsOf(trace) : [];
    const answered = calls.filter((s) => !s.result.isError).map((s) => s.key);
    return {
      jobsFinished: trace ? 1 : 0,
      jobsLost: trace ? 0 : 1,
      killedNode: victim.name,
      keys: perKey.size,
      keysWrittenTwice: [...perKey.values()].filter((n) => n > 1).length,
      answeredButMissing: answered.filter((k) => !perKey.has(k)).length,
      sessionRuns: [...new Set(calls.map((s) => s.sessionRun ?? 0))],
    };
  } finally {
    await connection.close();
  }
}

/** Whether the counts are the ones a correct cluster gives. */
export function checkPassed(c: CheckCounts): boolean {
  return (
    c.jobsFinished === 1 &&
    c.jobsLost === 0 &&
    c.keys === 4 &&
    c.keysWrittenTwice === 0 &&
    c.answeredButMissing === 0 &&
    c.sessionRuns.includes(2)
  );
}
