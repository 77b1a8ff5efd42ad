/**
 * What a node does with its tenants' shares before a call's attempt takes its slot for good (SPEC F2, F3): the
 * node's own rule for its slots, and its tenants' caps and rates, which their limiter workflows count across every
 * node (model/limiter.ts, workflows/shares.ts). A call that may not go on now **waits** — not here, in its job
 * workflow: the attempt gives its slot back at once, sends nothing and uses no attempt (./call/attempt.ts).
 *
 * A cap costs a call nothing when the node already holds a permit for it: the permits a node's calls gave back stay
 * its own for a moment ({@link LINGER_MS}), so the next call of the tenant takes one without asking; they go back at
 * once when calls wait in line, and a node renews what it keeps every second (a dead node's go back after
 * `node.permitHoldSeconds`). A rate asks the limiter for every call: it spaces calls across nodes.
 */
import {
  WithStartWorkflowOperation,
  WorkflowNotFoundError,
  WorkflowUpdateRPCTimeoutOrCancelledError,
} from '@temporalio/client';
import type { Client } from '@temporalio/client';
import type { Logger } from '../../common/logger';
import type { CallInput } from '../../model/activities';
import type { GiveInput, TakeRequest, TakeResult } from '../../model/limiter';
import { REMEMBERED } from '../../model/limiter';
import { randomUUID } from 'node:crypto';
import {
  giveSignal,
  giveUpdate,
  killsSignal,
  limitsSignal,
  takeManyUpdate,
  takeUpdate,
  withdrawSignal,
} from '../../model/messages';
import { UpdateBatcher, notTaken } from '../../common/update-batcher';
import { causesOf } from '../../common/causes';
import type { TenantSharesWorkflow } from '../../model/messages';
import { DEFAULT_PRIORITY, SHARES_WORKFLOW, limitsOf, mayTakeSlot, sharesWorkflowId } from '../../model/shares';
import type { Shares } from '../../model/shares';
import { ALL_TENANTS, sharesOf } from '../../model/policy-rules';
import type { TenantState } from '../../model/schemas';
import type { PolicyGate } from './gate';

/** An ask of a limiter that no worker answers in this long fails: the attempt sends nothing and may try again. */
const ASK_DEADLINE_MS = 10_000;
/** How often a node renews its permits, and gives back the ones idle past {@link LINGER_MS}. */
const RENEW_MS = 1000;
/** A permit a call gave back stays the node's this long for the tenant's next call, unless calls wait in line. */
const LINGER_MS = 1000;
/** F2: a call that gives its slot back holds it this long first: the slot's next poll must not find the same flood. */
export const SLOT_GIVE_BACK_MS = 250;
/** F2: its job tries again after about this long (spread by half, so a flood's calls do not come back as one). */
const SLOT_RETRY_MS = 1000;

/** N4: a call whose limiter is behind asks again after about this long (spread by half). */
const BEHIND_RETRY_MS = 2000;

/**
 * N4: the limiter did not take an ask (too many Updates in flight on it, its task failed before it took it) or did not
 * answer it in time (it is busy, or no node serves the policy queue now).
 */
export function limiterBehind(err: unknown): boolean {
  return notTaken(err) || [...causesOf(err)].some((e) => e instanceof WorkflowUpdateRPCTimeoutOrCancelledError);
}

/** A call may not go on now: it gives its slot back, and its job waits (model/activities.ts CallWaits). */
export class MustWait extends Error {
  constructor(
    /** `turn`: in its tenant's line until the limiter signals its turn; `slot`: try again after `retryInMs`. */
    readonly kind: 'turn' | 'slot',
    readonly why: string,
    readonly retryInMs?: number,
  ) {
    super(`waits: ${why}`);
  }
}

/** A call that may go on: release it when its attempt ends. */
export interface Admission {
  release(): void;
}

/** A node's worker queue and its slots, for F2. */
export interface QueueSlots {
  slots: number;
  reserve: number;
  /** Activities running on the queue now (every kind, the asking call included). */
  busy(): number;
}

/** What a node holds of one tenant's caps: permits by scope, how many its calls use, who waits in line. */
class TenantHold {
  held: Record<string, number> = {};
  used: Record<string, number> = {};
  /** When each scope's idle permits were last used (or given back to the node). */
  idleSince: Record<string, number> = {};
  /** Calls in line by scope, as the limiter last said: then idle permits go back at once. */
  waiting: Record<string, number> = {};
  /** A renewal or give is on its way: the next waits for it, so the node's messages never cross. */
  sending?: Promise<void>;
  /**
   * The next give, waiting for the one on its way: every call that ends meanwhile joins it (what it gives is counted
   * when it goes), so permits freed together go back in one message, not one round trip each.
   */
  next?: { done: Promise<void>; all: boolean };
  /** A give not answered yet (its deadline passed): sent again as it was, under its id, before any other. */
  pending?: GiveInput;
  /** Asks whose answers never came: what they may have taken goes back with the next give. */
  abandoned: string[] = [];
  /** The limits last known of the tenant (JSON): a change is told to its limiter. */
  limits?: string;
  /** Asks on their way: the hold stays while one may still bring a permit (else it would be held by no one). */
  asking = 0;

  idle(scope: string): number {
    return (this.held[scope] ?? 0) - (this.used[scope] ?? 0);
  }

  holding(): boolean {
    return Object.values(this.held).some((n) => n > 0);
  }

  /** Nothing held, used, asked for or owed: the node may forget the tenant. */
  quiet(): boolean {
    const inLine = Object.values(this.waiting).some((n) => n > 0);
    const used = Object.values(this.used).some((n) => n > 0);
    return !this.holding() && !inLine && !used && this.asking === 0 && !this.pending && this.abandoned.length === 0;
  }
}

export interface ShareGateDeps {
  client: Client;
  /** Where limiter workflows run: the namespace's policy queue. */
  taskQueue: string;
  /** This node's own queue: the holder of its permits. */
  holder: string;
  /** Its permits go back by themselves this long after its last renewal (it died, or lost Temporal). */
  holdMs: number;
  /** F2: the node's worker queues and their slots. */
  queues: Record<string, QueueSlots>;
  gate: PolicyGate;
  /** The config's shares of a tenant: what its policy state has until `oz0 tenant set` changes it. */
  seedOf(tenant: string): Shares | undefined;
  logger: Logger;
}

export class ShareGate {
  private readonly holds = new Map<string, TenantHold>();
  /** F2: calls running now, by queue, then tenant. */
  private readonly running = new Map<string, Map<string, number>>();
  /** F2: the weights of tenants this node ran calls of, from their shares. */
  private readonly weights = new Map<string, number>();
  private readonly timer: NodeJS.Timeout;
  private readonly unlisten: () => void;
  /** N4: this node's asks of each tenant's limiter, one Update in flight per limiter (common/update-batcher.ts). */
  readonly asks: UpdateBatcher<TakeRequest, TakeResult>;

  constructor(private readonly deps: ShareGateDeps) {
    const startOf = (tenant: string) =>
      new WithStartWorkflowOperation<TenantSharesWorkflow>(SHARES_WORKFLOW, {
        workflowId: sharesWorkflowId(tenant),
        taskQueue: deps.taskQueue,
        args: [{ tenant }],
        workflowIdConflictPolicy: 'USE_EXISTING',
        priority: { fairnessKey: tenant },
      });
    const { client } = deps;
    this.asks = new UpdateBatcher(takeManyUpdate.name, {
      many: async (tenant, requests) => {
        const results = await client.withDeadline(Date.now() + ASK_DEADLINE_MS, () =>
          client.workflow.executeUpdateWithStart(takeManyUpdate, {
            args: [requests],
            startWorkflowOperation: startOf(tenant),
          }),
        );
        return results.map((r) => ('refused' in r ? new Error(r.refused) : r));
      },
      one: (tenant, request) =>
        client.withDeadline(Date.now() + ASK_DEADLINE_MS, () =>
          client.workflow.executeUpdateWithStart(takeUpdate, {
            args: [request],
            startWorkflowOperation: startOf(tenant),
          }),
        ),
    });
    this.timer = setInterval(() => void this.renew(), RENEW_MS);
    this.timer.unref();
    // C5: a kill switch reaches the calls in line too: their limiter wakes the ones it covers (model/limiter.ts wake).
    this.unlisten = deps.gate.onChange((tenant, state) => this.policyChanged(tenant, state));
  }

  /**
   * May this attempt go on now? F2 first (the slot it was given), then F3 (its tenant's and its server's caps and
   * rates); throws {@link MustWait} when not. `signal` ends the wait of a slot given back (the call stopped).
   */
  async admit(
    call: {
      input: CallInput;
      server: string;
      queue: string;
      state: TenantState;
      /** The first attempt of this schedule of the call's activity (a grant it carries is unclaimed yet). */
      first?: boolean;
    },
    signal: AbortSignal,
  ): Promise<Admission> {
    const { input, server, queue, state, first } = call;
    const shares = sharesOf(state, this.deps.seedOf(input.tenant));
    this.weights.set(input.tenant, shares.weight);
    const byTenant = this.running.get(queue) ?? new Map<string, number>();
    this.running.set(queue, byTenant);
    // F2, in one synchronous step with the count it makes: two calls asking at once each see the other.
    const refused = this.slotRefused(input.tenant, queue, byTenant);
    if (refused) {
      await pause(SLOT_GIVE_BACK_MS, signal);
      throw refused;
    }
    byTenant.set(input.tenant, (byTenant.get(input.tenant) ?? 0) + 1);
    const leave = () => {
      const n = (byTenant.get(input.tenant) ?? 1) - 1;
      if (n > 0) byTenant.set(input.tenant, n);
      else byTenant.delete(input.tenant);
    };
    try {
      const taken = await this.take({ input, server, shares, version: state.version, first }, signal);
      return {
        release: () => {
          leave();
          if (!taken) return;
          // A grant claimed on the way gives its permit back once the claim is answered (counted by then).
          if (taken.claimed) void taken.claimed.then((ok) => ok && this.putBack(input.tenant, taken.hold, taken.caps));
          else this.putBack(input.tenant, taken.hold, taken.caps);
        },
      };
    } catch (err) {
      leave();
      throw err;
    }
  }

  /**
   * F2: whether the slot this attempt was given goes back: why, or undefined when it stays the call's. A slot that
   * goes back is held {@link SLOT_GIVE_BACK_MS} first.
   */
  private slotRefused(tenant: string, queue: string, running: Map<string, number>): MustWait | undefined {
    const slots = this.deps.queues[queue];
    if (!slots || slots.reserve === 0) return undefined;
    const verdict = mayTakeSlot({
      slots: slots.slots,
      reserve: slots.reserve,
      busy: slots.busy(),
      tenant,
      running,
      weightOf: (t) => this.weights.get(t) ?? 1,
    });
    if (verdict.ok) return undefined;
    const why =
      `this node keeps its last ${slots.reserve} of ${slots.slots} slots for tenants under their share, and ` +
      `${tenant} runs ${verdict.runs} here, its share being ${Math.round(verdict.share * 10) / 10}`;
    return new MustWait('slot', why, Math.round(SLOT_RETRY_MS * (0.5 + Math.random())));
  }

  /**
   * F3: the call's permits, from what the node holds or from its tenant's limiter: the cap scopes it holds now, and
   * the hold they go back to (the same one: the node keeps it while a call of it asks or runs). None: no limits.
   */
  private async take(
    call: { input: CallInput; server: string; shares: Shares; version: number; first?: boolean },
    signal: AbortSignal,
  ): Promise<{ hold: TenantHold; caps: string[]; claimed?: Promise<boolean> } | undefined> {
    const { input, server, shares } = call;
    const { caps, rates } = limitsOf(shares.limits, server);
    const capScopes = Object.keys(caps);
    if (capScopes.length === 0 && Object.keys(rates).length === 0) return undefined;
    const hold = this.holdOf(input.tenant);
    hold.limits ??= JSON.stringify(shares.limits);
    // N4: a turn's grant holds its permit at the limiter (counted as running) until a node claims it: the first attempt
    // it was scheduled for starts at once, and claims it on the way, in this node's next batch of asks. Not under a
    // rate (its grant says when to start), nor on a later attempt (the first may have claimed it).
    if (input.granted && call.first && Object.keys(rates).length === 0)
      return { hold, caps: capScopes, claimed: this.claim(hold, capScopes, input, server, call) };
    // A permit the node holds idle serves the call without asking, unless a call waits in line for it (its place).
    const local =
      !input.granted &&
      Object.keys(rates).length === 0 &&
      capScopes.every((s) => hold.idle(s) > 0 && !(hold.waiting[s] > 0));
    if (local) {
      for (const s of capScopes) hold.used[s] = (hold.used[s] ?? 0) + 1;
      return { hold, caps: capScopes };
    }
    const id = randomUUID();
    let result: TakeResult;
    hold.asking++;
    try {
      result = await this.ask(id, input, server, call);
    } catch (err) {
      // Its answer may have been lost after the limiter gave a permit: handed back by the ask's id.
      hold.abandoned.push(id);
      // N4: a limiter that is behind (Temporal did not take the ask, or it was not answered in time) holds the call
      // back, as a cap does: it waits in its job and asks again, using no attempt; it never fails for it.
      if (limiterBehind(err)) {
        const why = `${input.tenant}'s limiter is behind (${messageOf(err)})`;
        throw new MustWait('slot', why, Math.round(BEHIND_RETRY_MS * (0.5 + Math.random())));
      }
      throw err;
    } finally {
      hold.asking--;
    }
    this.deps.logger.debug(
      { tenant: input.tenant, key: input.key, granted: input.granted, result },
      'limiter answered',
    );
    hold.waiting = result.waiting;
    if (!result.ok) {
      const place = result.position === 1 ? 'first in line' : `${ordinal(result.position)} in line`;
      throw new MustWait('turn', `${result.why} (${place})`);
    }
    for (const s of result.caps) {
      hold.held[s] = (hold.held[s] ?? 0) + 1;
      hold.used[s] = (hold.used[s] ?? 0) + 1;
    }
    // A rate's start, less than a second off: kept here (Temporal's timers could not keep it to the millisecond).
    if (result.at !== undefined) await pause(result.at - Date.now(), signal);
    return { hold, caps: result.caps };
  }

  /**
   * Claims a grant for a call already started: its permits counted as the node's and in use meanwhile. Resolves to
   * whether the limiter had it. A grant gone (past its time, taken back) means the call runs on no permit: said, and
   * the line it was put in is left at once, so no permit is granted to it again.
   */
  private async claim(
    hold: TenantHold,
    scopes: string[],
    input: CallInput,
    server: string,
    call: { shares: Shares; version: number },
  ): Promise<boolean> {
    for (const s of scopes) {
      hold.held[s] = (hold.held[s] ?? 0) + 1;
      hold.used[s] = (hold.used[s] ?? 0) + 1;
    }
    const unclaimed = () => {
      for (const s of scopes) {
        hold.held[s] = Math.max(0, hold.held[s] - 1);
        hold.used[s] = Math.max(0, hold.used[s] - 1);
      }
      return false;
    };
    const id = randomUUID();
    hold.asking++;
    try {
      const result = await this.ask(id, input, server, call);
      hold.waiting = result.waiting;
      if (result.ok) return true;
      this.deps.logger.warn(
        { tenant: input.tenant, key: input.key, why: result.why },
        "a call's turn had no permit left at its limiter when claimed (its grant was past its time): it ran beyond the cap",
      );
    } catch {
      // Its answer may have been lost after the limiter counted the claim: handed back by the ask's id.
      hold.abandoned.push(id);
    } finally {
      hold.asking--;
    }
    // Out of the line the ask may have put it in (a claim that did take its permit leaves nothing to take out).
    await this.deps.client.workflow
      .getHandle(sharesWorkflowId(input.tenant))
      .signal(withdrawSignal, { jobId: input.jobId, key: input.key })
      .catch(() => undefined);
    return unclaimed();
  }

  /** One ask of the tenant's limiter (which starts it if need be), in this node's next batch of asks of it. */
  private ask(
    id: string,
    input: CallInput,
    server: string,
    call: { shares: Shares; version: number },
  ): Promise<TakeResult> {
    const request: TakeRequest = {
      id,
      holder: this.deps.holder,
      ttlMs: this.deps.holdMs,
      settings: { version: call.version, limits: call.shares.limits },
      call: {
        jobId: input.jobId,
        key: input.key,
        tool: input.tool,
        server,
        priority: input.priority ?? DEFAULT_PRIORITY,
      },
    };
    return this.asks.submit(input.tenant, request);
  }

  /** A call's permits are the node's again: kept a moment for the tenant's next call, or given back now. */
  private putBack(tenant: string, hold: TenantHold, caps: string[]): void {
    if (caps.length === 0) return;
    const now = Date.now();
    for (const s of caps) {
      hold.used[s] = Math.max(0, (hold.used[s] ?? 0) - 1);
      hold.idleSince[s] = now;
    }
    if (caps.some((s) => hold.waiting[s] > 0)) void this.send(tenant, hold, true);
  }

  private holdOf(tenant: string): TenantHold {
    let hold = this.holds.get(tenant);
    if (!hold) this.holds.set(tenant, (hold = new TenantHold()));
    return hold;
  }

  /**
   * Every second: each tenant's permits renewed, and the ones idle too long (or wanted in line) given back; and a
   * limiter with calls in line is asked after them, which is what gives them their turns (it keeps no clock). Not while
   * a message of the node's is still on its way to that limiter (one that no worker answers takes its deadline).
   */
  private async renew(): Promise<void> {
    await Promise.all(
      [...this.holds].map(async ([tenant, hold]) => {
        if (hold.sending) return;
        // A hold with a call still asking or running stays (its permit must come back to this very hold).
        if (hold.quiet()) this.holds.delete(tenant);
        else if (
          hold.holding() ||
          Object.values(hold.waiting).some((n) => n > 0) ||
          hold.pending ||
          hold.abandoned.length
        )
          await this.send(tenant, hold, false);
      }),
    );
  }

  /**
   * Gives back the idle permits that should go (`all`: every idle one), renewing the rest; one message at a time.
   * `last`: the node stops, and says so with a signal, which needs no worker to answer (it may be the last node).
   */
  private send(tenant: string, hold: TenantHold, all: boolean, last = false): Promise<void> {
    if (!last && hold.next) {
      hold.next.all ||= all;
      return hold.next.done;
    }
    // Gives are relative (the limiter takes n off), so the last one need not wait for one still on its way.
    const previous = last ? Promise.resolve() : (hold.sending ?? Promise.resolve());
    const next = { all, done: Promise.resolve() };
    if (!last && hold.sending) hold.next = next;
    const sending = previous.then(async () => {
      if (hold.next === next) hold.next = undefined;
      // A give not answered before is sent again as it was: the limiter counts it once.
      if (!hold.pending) {
        const now = Date.now();
        const give: Record<string, number> = {};
        for (const scope of Object.keys(hold.held)) {
          const idle = hold.idle(scope);
          const stale = now - (hold.idleSince[scope] ?? 0) >= LINGER_MS;
          if (idle > 0 && (next.all || stale || hold.waiting[scope] > 0)) give[scope] = idle;
        }
        // Counted out before the message goes: a call that starts meanwhile asks the limiter, never a permit in flight.
        for (const [scope, n] of Object.entries(give)) hold.held[scope] -= n;
        // At most what a limiter takes in one give (N4: a lost batch of asks may leave more): the rest go next time.
        const abandoned = hold.abandoned.splice(0, REMEMBERED);
        hold.pending = {
          holder: this.deps.holder,
          caps: give,
          ttlMs: this.deps.holdMs,
          id: randomUUID(),
          ...(abandoned.length ? { abandoned } : {}),
        };
      }
      const input = hold.pending;
      try {
        const { client } = this.deps;
        const handle = client.workflow.getHandle(sharesWorkflowId(tenant));
        if (last) await handle.signal(giveSignal, input);
        else
          hold.waiting = await client.withDeadline(Date.now() + ASK_DEADLINE_MS, () =>
            handle.executeUpdate(giveUpdate, { args: [input] }),
          );
        hold.pending = undefined;
      } catch (err) {
        // Its limiter is gone (ended by hand): so are the permits it counted; calls in flight finish, new ones ask.
        if (err instanceof WorkflowNotFoundError) {
          for (const scope of Object.keys(hold.held)) hold.held[scope] = 0;
          hold.pending = undefined;
        }
        this.deps.logger.warn({ tenant, err: messageOf(err) }, 'could not renew permits');
      }
    });
    const done: Promise<void> = sending.finally(() => {
      if (hold.sending === done) hold.sending = undefined;
    });
    hold.sending = done;
    next.done = done;
    return done;
  }

  /**
   * A tenant's (or every tenant's) policy changed, as this node learnt it. C5: a kill switch reaches the calls in line
   * too (their limiter wakes the ones it covers). F5: new limits reach the limiter at once, so calls in line that fit
   * now get their turn (`oz0 tenant set` tells it too).
   */
  private policyChanged(tenant: string, state: TenantState): void {
    const targets = tenant === ALL_TENANTS ? [...this.holds.keys()] : this.holds.has(tenant) ? [tenant] : [];
    for (const t of targets) {
      const hold = this.holds.get(t)!;
      const handle = this.deps.client.workflow.getHandle(sharesWorkflowId(t));
      const quiet = (what: string) => (err: Error) =>
        this.deps.logger.debug({ tenant: t, err: err.message }, `could not tell its limiter of ${what}`);
      if (tenant !== ALL_TENANTS) {
        const limits = sharesOf(state, this.deps.seedOf(t)).limits;
        const said = JSON.stringify(limits);
        if (hold.limits !== undefined && hold.limits !== said) {
          handle.signal(limitsSignal, { version: state.version, limits }).catch(quiet('new limits'));
        }
        hold.limits = said;
      }
      const waits = Object.values(hold.waiting).some((n) => n > 0);
      if (waits && state.kills.length > 0) handle.signal(killsSignal, { kills: state.kills }).catch(quiet('kills'));
    }
  }

  /**
   * F5: calls of each tenant running on this node now (0 for a tenant that ran some here before, so its series goes
   * on), and its calls in line as its limiter last said.
   */
  snapshot(): { running: Map<string, number>; waiting: Map<string, number> } {
    const running = new Map<string, number>([...this.weights.keys()].map((t) => [t, 0]));
    for (const byTenant of this.running.values())
      for (const [t, n] of byTenant) running.set(t, (running.get(t) ?? 0) + n);
    const waiting = new Map<string, number>();
    for (const [t, hold] of this.holds) waiting.set(t, Math.max(0, ...Object.values(hold.waiting)));
    return { running, waiting };
  }

  /** On shutdown: every permit goes back (a node that stops cleanly frees its tenants' caps at once). */
  async close(): Promise<void> {
    clearInterval(this.timer);
    this.unlisten();
    // The node's workers have stopped: no call of it runs, so every permit it holds is idle. A give still unanswered
    // goes first (under its id), then the rest.
    await Promise.all(
      [...this.holds].map(async ([tenant, hold]) => {
        for (let n = 0; n < 2 && (hold.pending || hold.holding() || hold.abandoned.length); n++)
          await this.send(tenant, hold, true, true);
      }),
    );
  }
}

/** Waits `ms`, or less when the attempt is stopped meanwhile. */
function pause(ms: number, signal: AbortSignal): Promise<void> {
  if (ms <= 0 || signal.aborted) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => (clearTimeout(timer), resolve()), { once: true });
  });
}

/** An error's message with its cause's (an Update's failure says why only in its cause). */
function messageOf(err: unknown): string {
  const e = err as Error & { cause?: Error };
  return e.cause?.message ? `${e.message}: ${e.cause.message}` : e.message;
}

function ordinal(n: number): string {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? 'th' : (['th', 'st', 'nd', 'rd'][n % 10] ?? 'th');
  return `${n}${suffix}`;
}
