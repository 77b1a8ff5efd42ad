/**
 * The short check CI runs on the local cluster (`npm run cluster -- --check`): one job whose harness session
 * writes to the ledger through two nodes, the node running the session killed (kill -9 of it and its servers)
 * after the session's first write, then the counts: the job finished, the fresh session ran on the other node,
 * and every key is in the ledger exactly once. Then answers of megabytes (D1-D3) on the cluster's S3 store: a job's
 * calls on both nodes, each answer read back whole by a client of its own, every object under the tenant's prefix.
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
import { connectJobClient, jobTrace, startJob } from '../../client/jobs';
import { loadConfig } from '../../common/config';
import { processDataOf } from '../../data';
import { contentDigest } from '../../examples/pages';
import { listKeys } from './seaweedfs';

export interface CheckCounts {
  /** D1-D3: answers read back whole (byte for byte what the server sent), of those the job's calls got. */
  answersWhole?: number;
  answersExpected?: number;
  /** The nodes that made them, and the store's objects of the job under its tenant's prefix. */
  answeringNodes?: number;
  storedObjects?: number;
  /** D4: those jobs' payloads in history sealed, and any left plain (a local activity's marker and search attributes
   * apart: Temporal's own, no tenant data). */
  sealedPayloads?: number;
  plainPayloads?: number;
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
  // oz0's data converter, from the cluster's config: the nodes seal the job's payloads (D4), and big ones are in S3.
  const data = processDataOf(loadConfig({ file: cluster.configFile }));
  const client = new Client({ connection, namespace: cluster.namespace, dataConverter: data.dataConverter });
  data.useClient(client);
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

/** D1-D3 on the cluster: a job of big answers, their calls on any node, read back whole from the S3 store. */
export async function checkAnswers(
  cluster: LocalCluster,
  say: (line: string) => void,
): Promise<
  Pick<
    CheckCounts,
    'answersWhole' | 'answersExpected' | 'answeringNodes' | 'storedObjects' | 'sealedPayloads' | 'plainPayloads'
  >
> {
  // The CLI's config (the cluster's own): its store's identity is the nodes'.
  process.env.OZ0_S3_ACCESS_KEY = cluster.s3.accessKeyId;
  process.env.OZ0_S3_SECRET_KEY = cluster.s3.secretAccessKey;
  const jc = await connectJobClient(loadConfig({ file: cluster.configFile }));
  try {
    // Jobs at once, so that both nodes make some of the calls: each answer read back by a client of its own.
    const steps = [
      ...[0, 1, 2, 3, 4, 5].map((i) => ({ call: 'pages.read_page', args: { kib: 3 * 1024, seed: 100 + i } })),
      { call: 'pages.screenshot', args: { width: 1280, height: 800 } },
    ];
    const handles = await Promise.all(steps.map((step) => startJob(jc, { tenant: 'acme', steps: [step] })));
    say(`check: ${handles.length} jobs started, a call of megabytes each`);
    await Promise.all(handles.map((h) => h.result()));
    const sent = new Map(readReceived(cluster.receivedLog).map((e) => [e.key as string, e.sha256 as string]));
    const calls = [];
    for (const h of handles)
      calls.push(...callsOf(await jobTrace(jc.client, h.workflowId, { data: jc.data, whole: true })));
    const keys = await listKeys(cluster.s3, `tenants/acme/`);
    // D4 with two nodes sharing the cluster's key folder: every payload the jobs left in history sealed.
    const encodings = (await Promise.all(handles.map(async (h) => payloadEncodings(await h.fetchHistory())))).flat();
    return {
      sealedPayloads: encodings.filter((e) => e === 'binary/oz0-sealed').length,
      plainPayloads: encodings.filter((e) => e !== 'binary/oz0-sealed' && e !== 'json/protobuf').length,
      answersWhole: calls.filter((c) => !c.result.isError && contentDigest(c.result) === sent.get(c.key)).length,
      answersExpected: steps.length,
      answeringNodes: new Set(calls.map((c) => c.node)).size,
      storedObjects: keys.filter((k) => handles.some((h) => k.includes(`/wi/${h.workflowId}/`))).length,
    };
  } finally {
    await jc.close();
  }
}

/**
 * The encoding of every payload of a history but its search attributes and its local activities' markers' own data
 * (Temporal's and the SDK's, which no codec touches); a stored payload's claim is `json/protobuf`.
 */
function payloadEncodings(history: unknown): string[] {
  const out: string[] = [];
  const walk = (v: unknown, key = ''): void => {
    if (!v || typeof v !== 'object' || key === 'searchAttributes') return;
    if (Array.isArray(v)) return v.forEach((x) => walk(x));
    const o = v as { metadata?: Record<string, Uint8Array>; markerName?: string; details?: Record<string, unknown> };
    if (o.metadata?.encoding instanceof Uint8Array) {
      out.push(Buffer.from(o.metadata.encoding).toString());
      return;
    }
    for (const [k, x] of Object.entries(o)) {
      if (o.markerName && k === 'details') {
        for (const [dk, dx] of Object.entries(o.details ?? {})) if (dk !== 'data') walk(dx, dk);
      } else walk(x, k);
    }
  };
  walk(history);
  return out;
}

/** Whether the counts are the ones a correct cluster gives. */
export function checkPassed(c: CheckCounts): boolean {
  return (
    c.answersWhole === c.answersExpected &&
    (c.storedObjects ?? 0) >= (c.answersExpected ?? 0) &&
    (c.sealedPayloads ?? 0) > 0 &&
    c.plainPayloads === 0 &&
    c.jobsFinished === 1 &&
    c.jobsLost === 0 &&
    c.keys === 4 &&
    c.keysWrittenTwice === 0 &&
    c.answeredButMissing === 0 &&
    c.sessionRuns.includes(2)
  );
}
