/**
 * SPEC D2: the one way oz0 turns what a job carries into Temporal payloads and back, for every process that reads or
 * writes them — a node's workers, the CLI, the inbox, and plain Temporal clients (the package exports it): Temporal's
 * default JSON, then Temporal's External Storage, which puts a payload past the threshold in the store, under its
 * workflow's owner, and leaves its claim in history. A process without the store of a claim fails the
 * one call or query that meets it, saying which store it lacks.
 */
import path from 'node:path';
import { ExternalStorage, defaultFailureConverter, defaultPayloadConverter } from '@temporalio/common';
import type { DataConverter, PayloadCodec, PayloadConverter } from '@temporalio/common';
import { AwsSdkS3StorageDriverClient } from '@temporalio/external-storage-s3-aws-sdk';
import { readSecret } from '../common/credentials';
import { payloadStoreOf } from '../common/payloads-config';
import type { PayloadStoreConfig, PayloadsConfig } from '../common/payloads-config';
import { FolderObjects } from './folder-objects';
import { PayloadOwners } from './owners';
import type { OwnerLookup } from './owners';
import { TenantStore } from './tenant-store';
import { newS3Client } from './s3-client';

/** What of a config the payloads need: the section, the state folder (the default store), the largest answer. */
export interface PayloadsSettings {
  payloads: PayloadsConfig;
  node: { stateDir: string; maxResultMiB: number };
  baseDir: string;
}

/** The folder store's bucket: a folder of its own inside the store's folder. */
const FOLDER_BUCKET = 'objects';

/** A process's payloads: its data converter, the pieces it is made of, and what to say of them. */
export interface PayloadData {
  /** For `new Client({ dataConverter })` and a worker's options. */
  dataConverter: DataConverter & { payloadCodecs: PayloadCodec[] };
  payloadConverter: PayloadConverter;
  codecs: PayloadCodec[];
  externalStorage?: ExternalStorage;
  /** Its store, if it has one. */
  store?: TenantStore;
  /** A folder store's folder of objects (./sweep.ts removes what Temporal no longer has a job for). */
  folder?: string;
  owners: PayloadOwners;
  /** Past this, a payload goes to the store (bytes). */
  thresholdBytes: number;
  /** D3: an answer past this is kept in the store by its call (bytes). */
  answerInlineBytes: number;
  /** For the start line: `payloads past 256 KiB go to the folder …`, or that none do. */
  said: string;
}

/** The data converter of a config's processes; `lookup` asks Temporal a job's tenant (./owners.ts). */
export function payloadDataOf(
  settings: PayloadsSettings,
  opts: { lookup?: OwnerLookup; env?: NodeJS.ProcessEnv } = {},
) {
  const owners = new PayloadOwners(opts.lookup);
  const config = payloadStoreOf(settings.payloads, settings.node.stateDir);
  const thresholdBytes = settings.payloads.thresholdKiB * 1024;
  // No codec of oz0's yet: a store files a payload by its workflow's owner (./tenant-store.ts).
  const codecs: PayloadCodec[] = [];
  const store = storeOf(config, settings, owners, opts.env ?? process.env);
  const externalStorage = store
    ? new ExternalStorage({ drivers: [store], payloadSizeThreshold: thresholdBytes })
    : undefined;
  const data: PayloadData = {
    dataConverter: {
      payloadCodecs: codecs,
      ...(externalStorage ? { externalStorage } : {}),
    },
    payloadConverter: defaultPayloadConverter,
    codecs,
    ...(externalStorage ? { externalStorage, store } : {}),
    ...(config !== 'off' && 'folder' in config
      ? { folder: path.join(path.resolve(settings.baseDir, config.folder), FOLDER_BUCKET) }
      : {}),
    owners,
    thresholdBytes,
    answerInlineBytes: Math.round(settings.payloads.answerInlineKiB * 1024),
    said: store
      ? `payloads of ${settings.payloads.thresholdKiB} KiB and more go to ${whereOf(config, settings.baseDir)}, history keeping their claims (SPEC D2)`
      : 'payloads.store is "off": every payload stays in Temporal’s history, under its 2 MiB limit (SPEC D2)',
  };
  return data;
}

/** The failure converter every oz0 process uses (Temporal's default). */
export const failureConverter = defaultFailureConverter;

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
