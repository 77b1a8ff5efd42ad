/**
 * SPEC D2: a store of payloads with a prefix per owner (a tenant, or the platform), on Temporal's own S3 driver: a
 * payload's bytes under `<prefix><owner>/v0/ns/<namespace>/wt/<type>/wi/<job>/ri/<run>/d/sha256/<digest>` — Temporal's
 * key layout, content addressed, the digest checked on every read — in a folder (the embedded default) or an
 * S3-compatible bucket (clusters). One tenant's objects can then be listed, expired by a lifecycle rule and granted
 * by its prefix alone, and the claim in history names the owner whose prefix holds the object. Whose a payload is
 * comes from its workflow: a job's tenant, as the process learnt it (./owners.ts), or the platform's.
 */
import { StorageDriverClaim } from '@temporalio/common';
import type {
  Payload,
  StorageDriver,
  StorageDriverRetrieveContext,
  StorageDriverStoreContext,
} from '@temporalio/common';
import { S3StorageDriver } from '@temporalio/external-storage-s3';
import type { S3RequestOptions, S3StorageDriverClient } from '@temporalio/external-storage-s3';
import { jsonOf, ownerOf } from './owner-of';
import { isOwner } from './owners';
import type { PayloadOwners } from './owners';
import { rootWords } from '../common/causes';

/** Where a payload whose owner could not be told goes: apart from every tenant's and from the platform's. */
export const UNOWNED = '@unowned';

export interface TenantStoreOptions {
  /** The driver's name in every claim: a process reads a claim only with a store of this name. */
  name: string;
  /** `oz0.folder`, `oz0.s3`: the kind of store, as a worker reports it to Temporal. */
  type: string;
  objects: S3StorageDriverClient;
  bucket: string;
  /** Before the owner's segment (`tenants/`, or nothing). */
  prefix: string;
  /** The largest payload it takes (bytes); past it a store fails, saying so. */
  maxBytes: number;
  /** Whose each workflow's payloads are (./owners.ts). */
  owners: PayloadOwners;
}

export class TenantStore implements StorageDriver {
  readonly name: string;
  readonly type: string;
  private readonly byOwner = new Map<string, S3StorageDriver>();

  constructor(private readonly opts: TenantStoreOptions) {
    this.name = opts.name;
    this.type = opts.type;
  }

  async store(context: StorageDriverStoreContext, payloads: Payload[]): Promise<StorageDriverClaim[]> {
    const claims = new Array<StorageDriverClaim>(payloads.length);
    // A payload that names its owner (a stored answer) is filed under it; any other under its workflow's owner.
    const workflowId = context.target?.kind === 'workflow' ? context.target.id : undefined;
    const owner = workflowId ? await this.opts.owners.of(workflowId, () => payloads.map(jsonOf)) : undefined;
    await Promise.all(
      groupBy(payloads, (p) => ownerOf(p) ?? owner ?? UNOWNED).map(async ([owner, group]) => {
        const made = await this.driverOf(owner).store(
          context,
          group.map(({ item }) => item),
        );
        made.forEach((claim, i) => {
          claims[group[i].index] = new StorageDriverClaim({ ...claim.claimData, owner });
        });
      }),
    );
    return claims;
  }

  async retrieve(context: StorageDriverRetrieveContext, claims: StorageDriverClaim[]): Promise<Payload[]> {
    const payloads = new Array<Payload>(claims.length);
    await Promise.all(
      groupBy(claims, (c) => c.claimData.owner ?? '').map(async ([owner, group]) => {
        if (owner !== UNOWNED && !isOwner(owner)) throw new Error(`a claim of ${this.name} names no owner it knows`);
        const read = await this.driverOf(owner).retrieve(
          context,
          group.map(({ item }) => item),
        );
        read.forEach((payload, i) => (payloads[group[i].index] = payload));
      }),
    );
    return payloads;
  }

  /** Whether the store takes this process's requests: why not, or undefined (a read of a key nobody writes). */
  async check(): Promise<string | undefined> {
    try {
      await this.opts.objects.objectExists(this.opts.bucket, `${this.opts.prefix}@check/reachable`);
      return undefined;
    } catch (err) {
      return rootWords(err);
    }
  }

  /** The store's own client and bucket, under no owner's prefix (the bench puts and gets through them directly). */
  get objects(): { client: S3StorageDriverClient; bucket: string } {
    return { client: this.opts.objects, bucket: this.opts.bucket };
  }

  /** Where an owner's objects lie, for a person: `s3://bucket/prefix/acme/`, a folder. */
  whereOf(owner: string): string {
    return `${this.opts.bucket}/${this.opts.prefix}${owner}/`;
  }

  private driverOf(owner: string): S3StorageDriver {
    let driver = this.byOwner.get(owner);
    if (!driver) {
      driver = new S3StorageDriver({
        client: prefixed(this.opts.objects, `${this.opts.prefix}${owner}/`),
        bucket: this.opts.bucket,
        driverName: this.name,
        maxPayloadSize: this.opts.maxBytes,
      });
      this.byOwner.set(owner, driver);
    }
    return driver;
  }
}

/** The same objects, each key under a prefix. */
function prefixed(objects: S3StorageDriverClient, prefix: string): S3StorageDriverClient {
  return {
    putObject: (bucket: string, key: string, data: Uint8Array, options?: S3RequestOptions) =>
      objects.putObject(bucket, prefix + key, data, options),
    objectExists: (bucket: string, key: string, options?: S3RequestOptions) =>
      objects.objectExists(bucket, prefix + key, options),
    getObject: (bucket: string, key: string, options?: S3RequestOptions) =>
      objects.getObject(bucket, prefix + key, options),
    ...(objects.describe ? { describe: () => objects.describe!() } : {}),
  };
}

function groupBy<T>(items: T[], keyOf: (item: T) => string): Array<[string, Array<{ item: T; index: number }>]> {
  const groups = new Map<string, Array<{ item: T; index: number }>>();
  items.forEach((item, index) => {
    const key = keyOf(item);
    const group = groups.get(key) ?? [];
    group.push({ item, index });
    groups.set(key, group);
  });
  return [...groups];
}
