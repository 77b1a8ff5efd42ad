/**
 * The node's view of its tenants' policies (A1-A3) and kill switches (C5). Every attempt registers itself
 * *before* it reads the state, and every read sweeps the registered calls: so a call that starts as a switch
 * is thrown either sees the switch or is stopped by the next read, which comes within `refreshMs`.
 */
import type { Client } from '@temporalio/client';
import { readPolicy } from '../client/policy';
import type { PolicyTarget } from '../client/policy';
import { ALL_TENANTS, killedBy } from '../workflows/policy-rules';
import type { TenantState } from '../workflows/policy-rules';
import type { Logger } from '../worker/logger';

export interface RunningCall {
  tenant: string;
  tool: string;
  /** Stops the call; `why` names the switch. */
  stop(why: string): void;
}

interface Registered extends RunningCall {
  /** Only a state read from this moment on may stop the call: an older one may predate a revive. */
  since: number;
}

interface Cached {
  state: TenantState;
  at: number;
}

export class PolicyGate {
  private readonly running = new Set<Registered>();
  private readonly cache = new Map<string, Cached>();
  private readonly inFlight = new Map<string, { state: Promise<TenantState>; at: number }>();
  /** The read that starts when a tenant's in-flight one ends, shared by every caller that came too late for it. */
  private readonly queued = new Map<string, Promise<TenantState>>();
  private readonly timer: NodeJS.Timeout;

  constructor(
    private readonly target: Pick<PolicyTarget, 'seeds'> & { client: Client },
    private readonly logger: Logger,
    /** How often the states of tenants with running calls are read again. */
    private readonly refreshMs: number,
  ) {
    this.timer = setInterval(() => void this.refreshRunning(), refreshMs);
    this.timer.unref();
  }

  /** Registers a running call, so a kill switch thrown from now on stops it. Call the result when it ends. */
  register(call: RunningCall): () => void {
    const registered: Registered = { ...call, since: Date.now() };
    this.running.add(registered);
    return () => this.running.delete(registered);
  }

  /**
   * The tenant's state and the all-tenants kill switches, from a read that started no earlier than `maxAgeMs` ago
   * (0: after this call). At most one read per tenant is in flight: callers that need a newer one share the next,
   * which starts when it ends — so under load a node makes about one read per round trip, not one per call.
   */
  async read(tenant: string, maxAgeMs: number): Promise<{ state: TenantState; globalKills: string[] }> {
    const [state, global] = await Promise.all([this.fresh(tenant, maxAgeMs), this.fresh(ALL_TENANTS, maxAgeMs)]);
    return { state, globalKills: global.kills };
  }

  private fresh(tenant: string, maxAgeMs: number): Promise<TenantState> {
    // A read that started before this moment (less the allowed age) may predate a change: never reuse it.
    const notBefore = Date.now() - maxAgeMs;
    const cached = this.cache.get(tenant);
    if (cached && cached.at >= notBefore) return Promise.resolve(cached.state);
    const inFlight = this.inFlight.get(tenant);
    if (!inFlight) return this.startRead(tenant);
    if (inFlight.at >= notBefore) return inFlight.state;
    let queued = this.queued.get(tenant);
    if (!queued) {
      const settled = inFlight.state.then(
        () => undefined,
        () => undefined,
      );
      queued = settled.then(() => {
        this.queued.delete(tenant);
        return this.startRead(tenant);
      });
      this.queued.set(tenant, queued);
    }
    return queued;
  }

  private startRead(tenant: string): Promise<TenantState> {
    const at = Date.now();
    const state = readPolicy(this.target, tenant)
      .then((read) => {
        const previous = this.cache.get(tenant);
        if (!previous || previous.at <= at) this.cache.set(tenant, { state: read, at });
        this.sweep();
        return read;
      })
      .finally(() => {
        if (this.inFlight.get(tenant)?.state === state) this.inFlight.delete(tenant);
      });
    this.inFlight.set(tenant, { state, at });
    return state;
  }

  /** Stops every registered call whose tool is killed, by its tenant's switch or an all-tenants one. */
  private sweep(): void {
    const kills = (tenant: string, since: number) => {
      const cached = this.cache.get(tenant);
      return cached && cached.at >= since ? cached.state.kills : [];
    };
    for (const call of this.running) {
      const kill = killedBy([...kills(ALL_TENANTS, call.since), ...kills(call.tenant, call.since)], call.tool);
      if (kill) {
        this.running.delete(call);
        call.stop(`oz0: tool killed (kill switch ${kill})`);
      }
    }
  }

  private async refreshRunning(): Promise<void> {
    if (this.running.size === 0) return;
    const tenants = new Set([...this.running].map((c) => c.tenant));
    try {
      await Promise.all([...tenants].map((tenant) => this.read(tenant, this.refreshMs / 2)));
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'could not read tenant policies');
    }
  }

  close(): void {
    clearInterval(this.timer);
  }
}
