/**
 * Whose data a payload is (SPEC D2, D4): its tenant, or the platform's. Temporal names the workflow a payload
 * belongs to, never its tenant; a process learns each job's tenant from what it does and reads — a call it makes, a
 * job it starts, a spec or a call's input in the payload itself — and asks Temporal (the job's `Oz0Tenant`) only for
 * a job it knows nothing of. Platform workflows (`oz0-policy/…`, `oz0-probe/…`) are the platform's own.
 */
import { TENANT_PATTERN } from '../model/checks';
import { reservedIdProblem } from '../model/schemas';

/** The owner of the platform's own payloads: no tenant's name can be it (a tenant's has no `@`). */
export const PLATFORM = '@platform';

/** The payload metadata key naming a payload's owner. */
export const OWNER_METADATA = 'oz0-owner';

/** Jobs remembered at once; one a process forgot is learnt again from the next payload of it, or asked. */
const REMEMBERED = 100_000;

/** Asks Temporal for a job's tenant (its `Oz0Tenant`), when no payload read said it. */
export type OwnerLookup = (workflowId: string) => Promise<string | undefined>;

export function isOwner(value: unknown): value is string {
  return typeof value === 'string' && (value === PLATFORM || TENANT_PATTERN.test(value));
}

/** workflow id → owner, learnt as payloads are read; most recent first out when full. */
export class PayloadOwners {
  private readonly known = new Map<string, string>();
  private readonly asking = new Map<string, Promise<string | undefined>>();

  constructor(private lookup?: OwnerLookup) {}

  /** Where a process has a client, misses are asked of Temporal through it (set once the client exists). */
  lookUpWith(lookup: OwnerLookup): void {
    this.lookup = lookup;
  }

  learn(workflowId: string, owner: string): void {
    if (!isOwner(owner) || platformId(workflowId)) return;
    if (this.known.get(workflowId) === owner) return;
    this.known.delete(workflowId);
    this.known.set(workflowId, owner);
    if (this.known.size > REMEMBERED) this.known.delete(this.known.keys().next().value!);
  }

  /** The owner of a workflow's payloads, if known without asking. */
  peek(workflowId: string): string | undefined {
    return platformId(workflowId) ? PLATFORM : this.known.get(workflowId);
  }

  /**
   * D4: a job started by a plain client (the Temporal CLI, a client without oz0's converter) has a plain spec: the
   * process reading it learns the job's tenant there, so that what it writes back is sealed with the tenant's key from
   * the first activation on, without asking Temporal (whose `Oz0Tenant` the job sets only once it runs).
   */
  learnFrom(workflowId: string, payloadsJson: () => unknown[]): void {
    if (this.peek(workflowId)) return;
    for (const value of payloadsJson()) {
      const tenant = specTenant(value);
      if (tenant) return this.learn(workflowId, tenant);
    }
  }

  /** The owner of a workflow's payloads: known, read from its own payloads, or asked of Temporal. */
  async of(workflowId: string, payloadsJson?: () => unknown[]): Promise<string | undefined> {
    const known = this.peek(workflowId);
    if (known) return known;
    // A job's start (or its next run's): the spec in its input names its tenant.
    for (const value of payloadsJson?.() ?? []) {
      const tenant = specTenant(value);
      if (tenant) {
        this.learn(workflowId, tenant);
        return tenant;
      }
    }
    if (!this.lookup) return undefined;
    let asking = this.asking.get(workflowId);
    if (!asking) {
      asking = this.lookup(workflowId)
        .catch(() => undefined)
        .finally(() => this.asking.delete(workflowId));
      this.asking.set(workflowId, asking);
    }
    const owner = await asking;
    if (owner) this.learn(workflowId, owner);
    return owner;
  }
}

/** A platform workflow's id (I11: `oz0-<word>/…`, which no job may take). */
export function platformId(workflowId: string): boolean {
  return reservedIdProblem(workflowId) !== undefined;
}

/** The tenant a job's spec (`{ tenant, steps }`) or a call's input (`{ tenant, jobId, … }`) names. */
function specTenant(value: unknown): string | undefined {
  if (!value || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const { tenant, steps, jobId } = value as { tenant?: unknown; steps?: unknown; jobId?: unknown };
  const named = Array.isArray(steps) || typeof jobId === 'string';
  return named && typeof tenant === 'string' && TENANT_PATTERN.test(tenant) ? tenant : undefined;
}
