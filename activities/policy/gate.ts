/**
 * The node's view of its tenants' policies (A1-A3) and kill switches (C5). Every attempt registers itself
 * *before* it reads the state, and every state the node learns sweeps the registered calls: so a call that
 * starts as a switch is thrown either sees the switch or is stopped by the next state, which comes with the
 * watch's news of the change, or within `refreshMs` for a tenant that is not watched.
 *
 * With watches on (the default), the node follows each tenant's policy workflow (./watch) and a first
 * attempt is checked against that live copy, with no read of its own; a read is made when the copy is not
 * caught up, for every retry (B6), and before any refusal.
 */
import { changePolicy, readPolicy } from '../../common/policy-client';
import { PolicyWatch } from './watch';
import type { PolicyTarget } from '../../common/policy-client';
import { ALL_TENANTS, killedBy, policyWorkflowId } from '../../model/policy-rules';
import { forgetQuestionSignal, watchQuestionUpdate, watchQuestionsUpdate } from '../../model/messages';
import { UpdateBatcher } from '../../common/update-batcher';
import type { Logger } from '../../common/logger';
import type { TenantState, WatchedQuestion } from '../../model/schemas';

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

/** A tenant's state and the all-tenants kill switches; `watched` when they came from the live copies. */
export interface PolicyRead {
  state: TenantState;
  globalKills: string[];
  watched: boolean;
}

/** A watch nobody read for this long (and with no running call) is stopped. */
const WATCH_IDLE_MS = 10 * 60_000;
/**
 * At most this many tenants are watched at once (each watch holds one long poll open on the node's connection);
 * the tenants past it are read per call, as without watches, until an idle watch is dropped.
 */
export const MAX_WATCHES = 100;

export class PolicyGate {
  private readonly running = new Set<Registered>();
  private readonly cache = new Map<string, Cached>();
  private readonly inFlight = new Map<string, { state: Promise<TenantState>; at: number }>();
  /** The read that starts when a tenant's in-flight one ends, shared by every caller that came too late for it. */
  private readonly queued = new Map<string, Promise<TenantState>>();
  private readonly watches = new Map<string, { watch: PolicyWatch; usedAt: number }>();
  private readonly listeners = new Set<(tenant: string, state: TenantState) => void>();
  private readonly timer: NodeJS.Timeout;
  /** N4: the questions this node's calls ask, one Update in flight per policy workflow (by its tenant, or `*`). */
  readonly questions: UpdateBatcher<WatchedQuestion, TenantState>;

  constructor(
    /** The client, the policy queue (to start a tenant's workflow nobody changed yet) and the config's seeds. */
    private readonly target: PolicyTarget,
    private readonly logger: Logger,
    /** How often the states of tenants with running calls are read again, when they are not watched. */
    private readonly refreshMs: number,
    /** Follow the tenants' policy workflows (./watch); off: every first attempt reads. */
    private readonly watch = false,
    /** N6 (`upgrade.rollbackSafe`): questions go one per Update, as the previous release's policy takes them. */
    singlesOnly = false,
  ) {
    this.timer = setInterval(() => void this.refreshRunning(), refreshMs);
    this.timer.unref();
    this.questions = new UpdateBatcher(
      watchQuestionsUpdate.name,
      {
        many: async (tenant, questions) => {
          const state = await changePolicy(this.target, tenant, watchQuestionsUpdate, [questions]);
          return questions.map(() => state);
        },
        one: (tenant, question) => changePolicy(this.target, tenant, watchQuestionUpdate, [question]),
      },
      singlesOnly,
    );
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
   * With `useWatch` (a first attempt), the live copies answer instead, when the tenant's and the all-tenants'
   * watches have both caught up; the answer says which it was.
   */
  async read(tenant: string, maxAgeMs: number, useWatch = false): Promise<PolicyRead> {
    const own = this.watched(tenant);
    const all = this.watched(ALL_TENANTS);
    if (useWatch && own && all) return { state: own, globalKills: all.kills, watched: true };
    const [state, global] = await Promise.all([this.fresh(tenant, maxAgeMs), this.fresh(ALL_TENANTS, maxAgeMs)]);
    return { state, globalKills: global.kills, watched: false };
  }

  /** The live copy of a tenant's state, if its watch is caught up; starts the watch if there is none. */
  private watched(tenant: string): TenantState | undefined {
    if (!this.watch) return undefined;
    let entry = this.watches.get(tenant);
    if (!entry) {
      if (this.watches.size >= MAX_WATCHES && tenant !== ALL_TENANTS) return undefined;
      const watch = new PolicyWatch(this.target, tenant, (state) => this.learn(tenant, state, Date.now()), this.logger);
      entry = { watch, usedAt: 0 };
      this.watches.set(tenant, entry);
    }
    entry.usedAt = Date.now();
    return entry.watch.state;
  }

  /**
   * A4: a call waits for a person's yes. Its tenant's policy workflow and the all-tenants one watch it from now on
   * (a change that may end the wait is told to its job), and their states as of that moment come back: a verdict
   * made with them cannot miss a change, since every later one is told.
   */
  async watchQuestion(tenant: string, question: WatchedQuestion): Promise<PolicyRead> {
    const at = Date.now();
    const [state, all] = await Promise.all([tenant, ALL_TENANTS].map((t) => this.questions.submit(t, question)));
    this.learn(tenant, state, at);
    this.learn(ALL_TENANTS, all, at);
    return { state, globalKills: all.kills, watched: false };
  }

  /** A4: the question's wait ended before it began (the verdict changed as it was asked): nothing to watch. */
  async forgetQuestion(tenant: string, question: Pick<WatchedQuestion, 'jobId' | 'key'>): Promise<void> {
    const { client } = this.target;
    await Promise.all(
      [tenant, ALL_TENANTS].map((t) =>
        client.workflow
          .getHandle(policyWorkflowId(t))
          .signal(forgetQuestionSignal, question)
          .catch((err: Error) => this.logger.debug({ tenant: t, err: err.message }, 'could not forget a question')),
      ),
    );
  }

  /** A state current as of `at`: kept unless a newer one is, and every running call is checked against it. */
  private learn(tenant: string, state: TenantState, at: number): void {
    const previous = this.cache.get(tenant);
    if (previous && previous.at > at) return;
    this.cache.set(tenant, { state, at });
    this.sweep();
    if (previous?.state.version !== state.version) for (const fn of this.listeners) fn(tenant, state);
  }

  /** Hears each new state the node learns of a tenant (or of the all-tenants switches, `*`): the gateway's news. */
  onChange(fn: (tenant: string, state: TenantState) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
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
    this.logger.debug({ tenant }, 'policy read');
    const state = readPolicy(this.target, tenant, { start: true })
      .then((read) => {
        this.learn(tenant, read, at);
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
    this.dropIdleWatches();
    if (this.running.size === 0) return;
    // A tenant whose copy is live (and the all-tenants one) hears of a change as it is made: no read needed.
    const allWatched = this.watched(ALL_TENANTS) !== undefined;
    const tenants = new Set([...this.running].map((c) => c.tenant).filter((t) => !allWatched || !this.watched(t)));
    if (tenants.size === 0) return;
    try {
      await Promise.all([...tenants].map((tenant) => this.read(tenant, this.refreshMs / 2)));
    } catch (err) {
      this.logger.warn({ err: (err as Error).message }, 'could not read tenant policies');
    }
  }

  private dropIdleWatches(): void {
    const busy = new Set([...this.running].map((c) => c.tenant));
    const before = Date.now() - WATCH_IDLE_MS;
    for (const [tenant, { watch, usedAt }] of this.watches) {
      if (tenant === ALL_TENANTS || busy.has(tenant) || usedAt > before) continue;
      watch.close();
      this.watches.delete(tenant);
    }
  }

  close(): void {
    clearInterval(this.timer);
    for (const { watch } of this.watches.values()) watch.close();
    this.watches.clear();
  }
}
