/**
 * SPEC D1-D3: where a call's payloads go past Temporal's history, as the config says it (`payloads`). Beside the
 * config's other sections so that every process reading the config — a node, the CLI, the inbox — stores and reads
 * payloads one way (data/ builds the stores from it).
 */
import { z } from 'zod';
import { SecretRefSchema } from './credentials';

/** An S3 bucket's name (S3's rules: 3-63 lower-case letters, digits, dots and hyphens, a letter or digit at each end). */
const BucketSchema = z
  .string()
  .regex(/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/, 'an S3 bucket is 3-63 lower-case letters, digits, "." or "-"');

/** D2, one machine: a folder (relative to the config's folder), shared by the nodes and clients of that machine. */
const FolderStoreSchema = z.strictObject({ folder: z.string().min(1) });

/** D2, clusters: an S3-compatible store every node and client reaches; each tenant's objects under a prefix of its own. */
const S3StoreSchema = z.strictObject({
  s3: z.strictObject({
    bucket: BucketSchema,
    /** An S3-compatible server's URL (SeaweedFS, Ceph, …); absent: Amazon S3 in `region`. */
    endpoint: z.url({ protocol: /^https?$/, error: 'endpoint is the store’s http(s) URL' }).optional(),
    region: z.string().min(1).default('us-east-1'),
    /** Path-style requests (`endpoint/bucket/key`), which most S3-compatible servers want; default: with an endpoint. */
    forcePathStyle: z.boolean().optional(),
    /** By reference (`env:NAME`, `file:PATH`); absent: the AWS SDK's own chain (its environment, profile, role). */
    accessKeyId: SecretRefSchema.optional(),
    secretAccessKey: SecretRefSchema.optional(),
    /** Objects go under `<prefix><tenant>/`; a lifecycle rule per prefix deletes them (docs/data.md). */
    prefix: z
      .string()
      .regex(/^([A-Za-z0-9!_.*'()-]+\/)*$/, 'a prefix is path segments each ending in "/"')
      .default(''),
  }),
});

export const PayloadStoreSchema = z.union([z.literal('off'), FolderStoreSchema, S3StoreSchema]);
export type PayloadStoreConfig = z.infer<typeof PayloadStoreSchema>;

/**
 * D4: how payloads are sealed: per owner (a tenant, or the platform) with AES-256-GCM, keys by reference or in a key
 * folder (data/keys.ts). `"off"` (or `newPayloads: "plain"`) writes new payloads plain, as before sealing, and still
 * opens the sealed ones with the keys it has: turning sealing off never strands what was sealed.
 */
export const SealSchema = z.union([
  z.literal('off'),
  z.strictObject({
    /**
     * Where `oz0 key rotate` writes keys and a node makes a tenant's first: `<folder>/<owner>/<time>-<id>.key`
     * (default: `<node.stateDir>/keys`). Every node and client that reads a tenant's jobs needs its keys: this folder
     * shared, or the keys by reference (`tenants.<t>.keys`).
     */
    folder: z.string().min(1).optional(),
    /** The platform's own keys by reference (`env:NAME`, `file:PATH`), newest first; they come before the folder's. */
    platformKeys: z.array(SecretRefSchema).max(100).default([]),
    /** `"plain"`: new payloads are not sealed (what is sealed still opens). */
    newPayloads: z.enum(['sealed', 'plain']).default('sealed'),
  }),
]);
export type SealConfig = z.infer<typeof SealSchema>;

export const PayloadsSchema = z
  .strictObject({
    /**
     * D2: where a payload past `thresholdKiB` goes, history keeping its claim: `{ "folder": … }` (default:
     * `<node.stateDir>/payloads`), `{ "s3": { … } }`, or `"off"` (everything inline, under Temporal's 2 MiB limit).
     */
    store: PayloadStoreSchema.optional(),
    /** D2: Temporal's External Storage threshold: a payload this big or bigger goes to the store (Temporal's default). */
    thresholdKiB: z.number().int().min(1).max(1900).default(256),
    /**
     * D3: a tool's answer larger than this is kept in the store by the call itself, its step in the trace holding the
     * claim: a trace of a thousand steps then stays small, whatever its answers. 0: every answer.
     */
    answerInlineKiB: z.number().min(0).max(256).default(2),
    /** D4: every payload sealed with its owner's key (default: on, keys in `<node.stateDir>/keys`), or `"off"`. */
    seal: SealSchema.prefault({}),
  })
  .prefault({});
export type PayloadsConfig = z.infer<typeof PayloadsSchema>;

/** The store a config uses: its own, or the folder `payloads` in its state folder. */
export function payloadStoreOf(payloads: PayloadsConfig, stateDir: string): PayloadStoreConfig {
  return payloads.store ?? { folder: `${stateDir.replace(/\/+$/, '')}/payloads` };
}

/** The sealing a config uses: its keys' folder (default: `keys` in its state folder), the platform's, whether new payloads are sealed. */
export function sealOf(
  payloads: PayloadsConfig,
  stateDir: string,
): { folder: string; platformKeys: readonly string[]; sealsNew: boolean } {
  const seal = payloads.seal;
  const folder = (seal !== 'off' && seal.folder) || `${stateDir.replace(/\/+$/, '')}/keys`;
  if (seal === 'off') return { folder, platformKeys: [], sealsNew: false };
  return { folder, platformKeys: seal.platformKeys, sealsNew: seal.newPayloads === 'sealed' };
}
