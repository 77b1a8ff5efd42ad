/**
 * SPEC D2, D4: the one way oz0 turns what a job carries into Temporal payloads and back, for every process that reads
 * or writes them — a node's workers, the CLI, the inbox, and plain Temporal clients (the package exports it):
 * Temporal's default JSON; oz0's seal, each payload under its owner's key (./seal.ts); then Temporal's External
 * Storage, which puts a sealed payload past the threshold in the store, under its workflow's owner, and leaves its
 * claim in history. Failures' messages and stacks travel as payloads too (Temporal's `encodeCommonAttributes`), so
 * they are sealed like the rest. A process without the store of a claim, or the key of a seal, fails the one call or
 * query that meets it, saying which store or key it lacks.
 */
import path from 'node:path';
import { ExternalStorage, defaultPayloadConverter } from '@temporalio/common';
import type { DataConverter, PayloadCodec, PayloadConverter } from '@temporalio/common';
import { AwsSdkS3StorageDriverClient } from '@temporalio/external-storage-s3-aws-sdk';
import { readSecret } from '../common/credentials';
import { payloadStoreOf, sealOf } from '../common/payloads-config';
import type { PayloadStoreConfig, PayloadsConfig } from '../common/payloads-config';
import { FolderObjects } from './folder-objects';
import { KeyRing } from './keys';
import { PLATFORM, PayloadOwners } from './owners';
import type { OwnerLookup } from './owners';
import { SealCodec } from './seal';
import { TenantStore } from './tenant-store';
import { newS3Client } from './s3-client';

/**
 * D4: the module whose `failureConverter` every process and the workflow bundle load (../model/failure-converter.ts):
 * resolved, so that it is the .ts of the sources under the tests and the .js of a build.
 */
export const FAILURE_CONVERTER_PATH = require.resolve('../model/failure-converter');

/** What of a config the payloads need: the section, the state folder (the default store), the largest answer. */
export interface PayloadsSettings {
  payloads: PayloadsConfig;
  node: { stateDir: string; maxResultMiB: number };
  /** D4: each tenant's keys by reference (`tenants.<t>.keys`). */
  tenants?: Record<string, { keys?: readonly string[] }>;
  baseDir: string;
}

/** The folder store's bucket: a folder of its own inside the store's folder. */
const FOLDER_BUCKET = 'objects';

/** A process's payloads: its data converter, the pieces it is made of, and what to say of them. */
export interface PayloadData {
  /** For `new Client({ dataConverter })` and a worker's options. */
  dataConverter: DataConverter & { payloadCodecs: PayloadCodec[]; failureConverterPath: string };
  payloadConverter: PayloadConverter;
  codecs: PayloadCodec[];
  externalStorage?: ExternalStorage;
  /** Its store, if it has one. */
  store?: TenantStore;
  /** A folder store's folder of objects (./sweep.ts removes what Temporal no longer has a job for). */
  folder?: string;
  owners: PayloadOwners;
  /** D4: the keys that seal and open payloads. */
  keys: KeyRing;
  /** D4: whether new payloads are sealed (`payloads.seal` not "off"). */
  sealsNew: boolean;
  /** Past this, a payload goes to the store (bytes). */
  thresholdBytes: number;
  /** D3: an answer past this is kept in the store by its call (bytes). */
  answerInlineBytes: number;
  /** For the start line: `payloads past 256 KiB go to the folder …`, or that none do. */
  said: string;
  /** D6, for the start line: what this process seals with. */
  sealSaid: string;
}

/** The data converter of a config's processes; `lookup` asks Temporal a job's tenant (./owners.ts). */
export function payloadDataOf(
  settings: PayloadsSettings,
  opts: { lookup?: OwnerLookup; env?: NodeJS.ProcessEnv } = {},
) {
  const owners = new PayloadOwners(opts.lookup);
  const config = payloadStoreOf(settings.payloads, settings.node.stateDir);
  const thresholdBytes = settings.payloads.thresholdKiB * 1024;
  const env = opts.env ?? process.env;
  const { keys, sealsNew } = keyRingOf(settings, env);
  // With sealing off, new payloads go plain and the sealed ones still open with the keys this process has (D6).
  const codecs: PayloadCodec[] = [new SealCodec(keys, owners, { sealsNew })];
  const store = storeOf(config, settings, owners, env);
  const externalStorage = store
    ? new ExternalStorage({ drivers: [store], payloadSizeThreshold: thresholdBytes })
    : undefined;
  const data: PayloadData = {
    dataConverter: {
      payloadCodecs: codecs,
      failureConverterPath: FAILURE_CONVERTER_PATH,
      ...(externalStorage ? { externalStorage } : {}),
    },
    payloadConverter: defaultPayloadConverter,
    codecs,
    ...(externalStorage ? { externalStorage, store } : {}),
    ...(config !== 'off' && 'folder' in config
      ? { folder: path.join(path.resolve(settings.baseDir, config.folder), FOLDER_BUCKET) }
      : {}),
    owners,
    keys,
    sealsNew,
    thresholdBytes,
    answerInlineBytes: Math.round(settings.payloads.answerInlineKiB * 1024),
    said: store
      ? `payloads of ${settings.payloads.thresholdKiB} KiB and more go to ${whereOf(config, settings.baseDir)}, history keeping their claims (SPEC D2)`
      : 'payloads.store is "off": every payload stays in Temporal’s history, under its 2 MiB limit (SPEC D2)',
    sealSaid: sealSaidOf(keys, sealsNew, settings),
  };
  return data;
}

/** D4: the keys of a config's processes: its tenants' and the platform's by reference, then its key folder's. */
function keyRingOf(settings: PayloadsSettings, env: NodeJS.ProcessEnv): { keys: KeyRing; sealsNew: boolean } {
  const seal = sealOf(settings.payloads, settings.node.stateDir);
  const refs: Record<string, readonly string[]> = { [PLATFORM]: seal.platformKeys };
  for (const [tenant, t] of Object.entries(settings.tenants ?? {})) if (t.keys?.length) refs[tenant] = t.keys;
  const keys = new KeyRing({
    folder: path.resolve(settings.baseDir, seal.folder),
    refs,
    env,
    baseDir: settings.baseDir,
    // A process that seals nothing new makes no key.
    make: seal.sealsNew,
  });
  return { keys, sealsNew: seal.sealsNew };
}

/** D6: what a process seals with, said at its start: the key of each owner it has by reference, and the folder. */
function sealSaidOf(keys: KeyRing, sealsNew: boolean, settings: PayloadsSettings): string {
  if (!sealsNew) {
    return `payloads.seal is "off": new payloads lie in Temporal and the store as plain text; sealed ones still open with the keys in ${keys.folder} (SPEC D4)`;
  }
  const named = [PLATFORM, ...Object.keys(settings.tenants ?? {})].filter((o) => keys.byReference(o));
  const byRef = named.map((o) => {
    const who = o === PLATFORM ? 'the platform' : o;
    try {
      return `${who} with key ${keys.keysOf(o)[0]!.id}`;
    } catch (err) {
      // D6: a key this process cannot read fails that owner's payloads, one call or query at a time, never the node.
      return `${who} with NO key here (${(err as Error).message}: its payloads neither seal nor open in this process)`;
    }
  });
  return (
    `payloads sealed per tenant (AES-256-GCM, SPEC D4): ${byRef.length ? `${byRef.join(', ')} (by reference); ` : ''}` +
    `every other owner with its newest key in ${keys.folder}, made there on its first payload`
  );
}

function storeOf(
  config: PayloadStoreConfig,
  settings: PayloadsSettings,
  owners: PayloadOwners,
  env: NodeJS.ProcessEnv,
): TenantStore | undefined {
  // The store takes the largest answer and what a payload wraps around it.
  const maxBytes = (settings.node.maxResultMiB + 8) * 1024 * 1024;
  if (config === 'off') return undefined;
  if ('folder' in config) {
    const objects = new FolderObjects(path.resolve(settings.baseDir, config.folder));
    return new TenantStore({
      name: 'oz0.folder',
      type: 'oz0.folder',
      objects,
      bucket: FOLDER_BUCKET,
      prefix: '',
      maxBytes,
      owners,
    });
  }
  const s3 = config.s3;
  const where = { env, baseDir: settings.baseDir };
  const credentials =
    s3.accessKeyId && s3.secretAccessKey
      ? {
          accessKeyId: readSecret(s3.accessKeyId, where, 'payloads.store.s3.accessKeyId'),
          secretAccessKey: readSecret(s3.secretAccessKey, where, 'payloads.store.s3.secretAccessKey'),
        }
      : undefined;
  const client = newS3Client({
    region: s3.region,
    ...(s3.endpoint ? { endpoint: s3.endpoint } : {}),
    ...(s3.forcePathStyle !== undefined ? { forcePathStyle: s3.forcePathStyle } : {}),
    ...(credentials ? { credentials } : {}),
  });
  const objects = new AwsSdkS3StorageDriverClient(client);
  return new TenantStore({
    name: 'oz0.s3',
    type: 'oz0.s3',
    objects,
    bucket: s3.bucket,
    prefix: s3.prefix,
    maxBytes,
    owners,
  });
}

/** Where a store keeps its objects, for a person. */
export function whereOf(config: PayloadStoreConfig, baseDir: string): string {
  if (config === 'off') return 'nowhere (payloads.store: "off")';
  if ('folder' in config) return `the folder ${path.join(path.resolve(baseDir, config.folder), FOLDER_BUCKET)}`;
  const { bucket, endpoint, prefix } = config.s3;
  return `s3://${bucket}/${prefix}<tenant>/${endpoint ? ` at ${endpoint}` : ''}`;
}
