/**
 * D2 on a cluster's store: Temporal's External Storage on a real S3-compatible server (SeaweedFS from its Go module,
 * `weed server -s3`; `npm run s3:install` builds it, as .ci/run does), its credentials by reference. Asserted on the
 * store's own listing (each tenant's objects under its prefix, none of another's), on Temporal's side (no payload past
 * the threshold in history) and on the server's (what it answered, byte for byte) — beside the controls: a node whose
 * credentials the store refuses says so in the call's note and goes on.
 */
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { GetBucketLifecycleConfigurationCommand, PutBucketLifecycleConfigurationCommand } from '@aws-sdk/client-s3';
import { connectJobClient, jobTrace, startJob } from '../../client/jobs';
import { readReceived } from '../../examples/common';
import { contentDigest } from '../../examples/pages';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import type { LoadedConfig } from '../../common/config';
import { createNode } from '../../worker/node';
import { listKeys, s3Client, seaweedfsBinary, startSeaweedfs } from '../../deploy/local-cluster/seaweedfs';
import type { RunningS3 } from '../../deploy/local-cluster/seaweedfs';
import { ROOT, example, logger, tmpDir, uniqueId, useTemporal } from '../helpers/temporal';
import { historyPayloads } from '../helpers/history';

const temporal = useTemporal();
const bin = seaweedfsBinary(ROOT);
const withS3: jest.It = fs.existsSync(bin) ? test : (test.skip as jest.It);
const skipped = fs.existsSync(bin) ? '' : ' (skipped: no SeaweedFS; npm run s3:install builds it, as .ci/run does)';
let s3: RunningS3 | undefined;

beforeAll(async () => {
  if (!fs.existsSync(bin)) return;
  s3 = await startSeaweedfs(bin, tmpDir('oz0-s3-'));
  process.env.OZ0_TEST_S3_KEY = s3.accessKeyId;
  process.env.OZ0_TEST_S3_SECRET = s3.secretAccessKey;
}, 90_000);
afterAll(async () => {
  delete process.env.OZ0_TEST_S3_KEY;
  delete process.env.OZ0_TEST_S3_SECRET;
  await s3?.stop();
});

function s3Config(secret = 'env:OZ0_TEST_S3_SECRET') {
  const log = path.join(tmpDir(), 'pages.jsonl');
  const config = temporal.config({
    servers: { pages: { command: 'node', args: [example('pages')], env: { OZ0_RECEIVED_LOG: log } } },
    payloads: {
      store: {
        s3: {
          bucket: s3!.bucket,
          endpoint: s3!.endpoint,
          accessKeyId: 'env:OZ0_TEST_S3_KEY',
          secretAccessKey: secret,
          prefix: 'tenants/',
        },
      },
    },
  });
  return { config, log };
}

/** The bucket's keys under a prefix, as the store lists them. */
const listed = (prefix: string) => listKeys(s3!, prefix);

async function runBoth(config: LoadedConfig, specs: Array<{ tenant: string; steps: object[] }>) {
  const jc = await connectJobClient(config);
  const node = await createNode({ config, logger });
  try {
    return await node.runUntil(() =>
      Promise.all(
        specs.map(async (spec) => {
          const handle = await startJob(jc, spec);
          const raw: JobTrace = await handle.result();
          const shown = await jobTrace(jc.client, handle.workflowId, { data: jc.data, whole: true });
          return { id: handle.workflowId, runId: (await handle.describe()).runId, raw, shown };
        }),
      ),
    );
  } finally {
    await jc.close();
  }
}

withS3(
  `D1, D2: on an S3 store, each tenant's answers and big payloads lie under its own prefix, read back whole, and history holds claims${skipped}`,
  async () => {
    const { config, log } = s3Config();
    const [acme, beta] = [uniqueId('acme'), uniqueId('beta')];
    const steps = (seed: number) => [
      { call: 'pages.read_page', args: { kib: 10 * 1024, seed } },
      { call: 'pages.screenshot', args: { width: 800, height: 655, seed } },
      // Its arguments past the threshold: the spec itself, and the call's input, are stored too.
      // Random: sealing deflates what it seals (D4), and a repeated letter would shrink under the threshold.
      { call: 'pages.read_page', args: { kib: 8, seed, note: randomBytes(300 * 1024).toString('base64') } },
    ];
    const [a, b] = await runBoth(config, [
      { tenant: acme, steps: steps(1) },
      { tenant: beta, steps: steps(2) },
    ]);
    const server = new Map(readReceived(log).map((e) => [e.key as string, e.sha256 as string]));
    for (const run of [a, b]) {
      expect(run.shown.status).toBe('COMPLETED');
      for (const step of callsOf(run.shown)) expect(contentDigest(step.result)).toBe(server.get(step.key));
      for (const step of callsOf(run.raw)) expect(step.result.stored?.driver).toBe('oz0.s3');
      const payloads = historyPayloads(temporal.server, run.id, run.runId);
      expect(Math.max(...payloads.map((p) => p.bytes))).toBeLessThan(256 * 1024);
    }
    // The store's own listing: every object of a tenant's jobs under its prefix, none of the other's.
    const acmeKeys = await listed(`tenants/${acme}/`);
    const betaKeys = await listed(`tenants/${beta}/`);
    expect(acmeKeys.length).toBeGreaterThanOrEqual(4);
    expect(betaKeys.length).toBeGreaterThanOrEqual(4);
    expect(acmeKeys.every((k) => k.includes(`/wi/${a.id}/`))).toBe(true);
    expect(betaKeys.every((k) => k.includes(`/wi/${b.id}/`))).toBe(true);
    expect(acmeKeys.some((k) => k.includes(b.id))).toBe(false);
  },
  180_000,
);

withS3(
  `D2: a node whose credentials the store refuses says so in the call's note, and goes on; its answer, kept small, reaches the job${skipped}`,
  async () => {
    process.env.OZ0_TEST_S3_WRONG = 'not-the-secret';
    try {
      const { config } = s3Config('env:OZ0_TEST_S3_WRONG');
      const [run] = await runBoth(config, [
        {
          tenant: uniqueId('acme'),
          steps: [
            { call: 'pages.save_snapshot', args: { kib: 64 } },
            { call: 'pages.read_page', args: { kib: 1 } },
          ],
        },
      ]);
      const [big, small] = callsOf(run.raw);
      expect(big.result.isError).toBe(true);
      expect(big.attempts.at(-1)!.note).toMatch(
        /did its work, but its answer could not be stored: the store oz0-payloads\/tenants\/.*\/ refused it: HTTP 403/,
      );
      expect(small.result.isError).toBe(false);
    } finally {
      delete process.env.OZ0_TEST_S3_WRONG;
    }
  },
  120_000,
);

withS3(
  `D2: a lifecycle rule per tenant prefix, as docs/data.md gives it, is one the store takes and keeps${skipped}`,
  async () => {
    const client = s3Client(s3!);
    try {
      const rules = [
        { ID: 'oz0-acme', Filter: { Prefix: 'tenants/acme/' }, Status: 'Enabled' as const, Expiration: { Days: 31 } },
      ];
      await client.send(
        new PutBucketLifecycleConfigurationCommand({ Bucket: s3!.bucket, LifecycleConfiguration: { Rules: rules } }),
      );
      const kept = await client.send(new GetBucketLifecycleConfigurationCommand({ Bucket: s3!.bucket }));
      expect(kept.Rules).toEqual([expect.objectContaining({ ID: 'oz0-acme', Expiration: { Days: 31 } })]);
    } finally {
      client.destroy();
    }
  },
);
