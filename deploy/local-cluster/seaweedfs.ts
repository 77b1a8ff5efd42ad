/**
 * SeaweedFS, the S3-compatible payload store of the local cluster and of the tests that try an S3 store (SPEC D2): a
 * real object store, built from its Go module at a pinned version into `.tools/seaweedfs/<version>/weed` and reused
 * when present, run as `weed server -s3` (master, volume, filer and S3 gateway in one process) on free ports of
 * 127.0.0.1, its S3 API taking one identity's signed requests alone. `npm run s3:install` prints the binary's path.
 *
 * The module has a replace directive, which `go install pkg@version` refuses: it is built in a module of its own
 * that requires it and repeats its replace, as Jaeger is (./jaeger.ts).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { CreateBucketCommand, ListObjectsV2Command } from '@aws-sdk/client-s3';
import type { S3Client } from '@aws-sdk/client-s3';
import { newS3Client } from '../../data';
import { projectRoot } from '../../common/paths';
import { freePort } from '../../worker/dev-server';
import { goIn } from './go-tools';

/** The pseudo-version the Go module proxy serves (SeaweedFS tags no semver release the proxy lists). */
export const SEAWEEDFS_VERSION = 'v0.0.0-20261109003541-7506e5f91cd6';
const MODULE = 'github.com/seaweedfs/seaweedfs';

/** Where the binary goes. */
export function seaweedfsBinary(root = projectRoot()): string {
  return path.join(root, '.tools', 'seaweedfs', SEAWEEDFS_VERSION, 'weed');
}

/** The `weed` binary, built once (minutes on a fresh machine); `say` tells a person what goes on. */
export async function ensureSeaweedfs(root = projectRoot(), say: (line: string) => void = () => undefined) {
  const bin = seaweedfsBinary(root);
  if (fs.existsSync(bin)) return bin;
  const home = path.dirname(bin);
  const module = path.join(home, 'module');
  fs.mkdirSync(module, { recursive: true });
  const logFile = path.join(home, 'build.log');
  const started = Date.now();
  say(`building SeaweedFS ${SEAWEEDFS_VERSION} with Go; several minutes on a fresh machine, output in ${logFile}`);
  const ticker = setInterval(
    () => say(`still building SeaweedFS (${Math.round((Date.now() - started) / 1000)} s)`),
    60_000,
  );
  try {
    if (!fs.existsSync(path.join(module, 'go.mod')))
      await goIn(['mod', 'init', 'oz0.local/seaweedfs'], module, logFile);
    // The module's own replace: go-bip39's original repository is gone; its go.mod points at the fork.
    await goIn(
      ['mod', 'edit', '-replace', 'github.com/tyler-smith/go-bip39=github.com/cosmos/go-bip39@v1.0.0'],
      module,
      logFile,
    );
    await goIn(['get', `${MODULE}/weed@${SEAWEEDFS_VERSION}`], module, logFile);
    await goIn(['build', '-o', bin, `${MODULE}/weed`], module, logFile);
  } finally {
    clearInterval(ticker);
  }
  say(`built SeaweedFS in ${Math.round((Date.now() - started) / 1000)} s`);
  return bin;
}

export interface RunningS3 {
  /** The S3 API, e.g. `http://127.0.0.1:31234`. */
  endpoint: string;
  bucket: string;
  /** The one identity it takes (a test's or the cluster's own, made at its first start). */
  accessKeyId: string;
  secretAccessKey: string;
  logFile: string;
  stop(): Promise<void>;
}

/** Ports of `weed server`: each service's HTTP and gRPC, all given, so that no default one (fixed) is taken twice. */
const PORTS = ['master', 'master.grpc', 'volume', 'volume.grpc', 'filer', 'filer.grpc', 's3', 's3.grpc'] as const;

/**
 * Starts SeaweedFS on free ports of 127.0.0.1, its data in `dir` (kept across restarts, with its identity), and makes
 * the bucket. Resolves once its S3 API answers a signed request.
 */
export async function startSeaweedfs(bin: string, dir: string, bucket = 'oz0-payloads'): Promise<RunningS3> {
  fs.mkdirSync(path.join(dir, 'data'), { recursive: true });
  const identityFile = path.join(dir, 's3.json');
  if (!fs.existsSync(identityFile)) {
    const identity = { accessKey: `oz0${randomBytes(8).toString('hex')}`, secretKey: randomBytes(24).toString('hex') };
    const config = {
      identities: [{ name: 'oz0', credentials: [identity], actions: ['Admin', 'Read', 'Write', 'List'] }],
    };
    fs.writeFileSync(identityFile, JSON.stringify(config), { mode: 0o600 });
  }
  const { accessKey, secretKey } = JSON.parse(fs.readFileSync(identityFile, 'utf8')).identities[0].credentials[0] as {
    accessKey: string;
    secretKey: string;
  };
  const ports = Object.fromEntries(await Promise.all(PORTS.map(async (p) => [p, await freePort()] as const)));
  const args = [
    'server',
    `-dir=${path.join(dir, 'data')}`,
    '-ip=127.0.0.1',
    '-ip.bind=127.0.0.1',
    ...PORTS.map((p) => `-${p.replace('.grpc', '.port.grpc').replace(/^(\w+)$/, '$1.port')}=${ports[p]}`),
    '-filer',
    '-s3',
    `-s3.config=${identityFile}`,
    // Off: its Iceberg and Lance catalogs, which take fixed ports by default.
    '-s3.port.iceberg=0',
    '-s3.port.lance=0',
    // Volumes of 64 MiB: a test's store needs little room, and a volume takes its limit on disk as it grows.
    '-master.volumeSizeLimitMB=64',
    '-volume.max=0',
  ];
  const logFile = path.join(dir, 'seaweedfs.log');
  const log = fs.openSync(logFile, 'a');
  const proc = spawn(bin, args, { stdio: ['ignore', log, log], detached: true });
  fs.closeSync(log);
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    const late = setTimeout(() => proc.kill('SIGKILL'), 10_000);
    await exited;
    clearTimeout(late);
  };
  const endpoint = `http://127.0.0.1:${ports.s3}`;
  const s3: RunningS3 = { endpoint, bucket, accessKeyId: accessKey, secretAccessKey: secretKey, logFile, stop };
  const deadline = Date.now() + 60_000;
  for (;;) {
    try {
      await makeBucket(s3);
      return s3;
    } catch (err) {
      if (Date.now() > deadline || proc.exitCode !== null) {
        await stop();
        throw new Error(`SeaweedFS did not start (see ${logFile}): ${(err as Error).message}`);
      }
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}

/** A client of the running store, as its identity. */
export function s3Client(s3: RunningS3, maxAttempts?: number): S3Client {
  const credentials = { accessKeyId: s3.accessKeyId, secretAccessKey: s3.secretAccessKey };
  return newS3Client({ endpoint: s3.endpoint, credentials, ...(maxAttempts ? { maxAttempts } : {}) });
}

/** The keys under a prefix, as the store lists them. */
export async function listKeys(s3: RunningS3, prefix: string): Promise<string[]> {
  const client = s3Client(s3);
  try {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const page = await client.send(
        new ListObjectsV2Command({ Bucket: s3.bucket, Prefix: prefix, ContinuationToken: token }),
      );
      keys.push(...(page.Contents ?? []).map((o) => o.Key!));
      token = page.NextContinuationToken;
    } while (token);
    return keys;
  } finally {
    client.destroy();
  }
}

/** Makes the bucket (a bucket already there is fine). */
async function makeBucket(s3: RunningS3): Promise<void> {
  const client = s3Client(s3, 1);
  try {
    await client.send(new CreateBucketCommand({ Bucket: s3.bucket }));
  } catch (err) {
    if ((err as { name?: string }).name !== 'BucketAlreadyOwnedByYou') throw err;
  } finally {
    client.destroy();
  }
}

if (require.main === module) {
  ensureSeaweedfs(projectRoot(), (line) => process.stderr.write(`${line}\n`))
    .then((bin) => process.stdout.write(`${bin}\n`))
    .catch((err: unknown) => {
      console.error((err as Error).message);
      process.exit(1);
    });
}
