/**
 * The counting behind a tenant's caps and rates (SPEC F3), across every node: the state its limiter workflow keeps
 * (workflows/shares.ts) and the pure rules that change it. Pure: the workflow bundle imports it, and the unit tests
 * drive it as the workflow does.
 *
 * - A **cap** (`maxRunningCalls`) counts permits. A node holds permits for the calls it runs (its *holder*, renewed
 *   while it holds any, dropped when it stops renewing); a call that finds no permit joins the tenant's line, in order
 *   of priority, then arrival; when a permit frees, the first call in line that fits gets a *grant*, held for it until
 *   the node that runs it claims it.
 * - A **rate** (`callsPerSecond`) spaces calls: each is given a start at least 1/rate after the one before, on all
 *   nodes together. Temporal's timers fire to about a second, so a start less than {@link PACE_MS} away is kept by the
 *   node that takes it (it starts the call then); a call whose start is further off joins the line, and gets its
 *   start when that comes within reach.
 * - The limiter keeps no clock of its own: each message (a node's ask, renewal, give) looks for holders and grants
 *   past their time first, and gives the calls in line their turns.
 *
 * Every change is relative (a node takes one, gives back n): two messages of one node that cross never undo each other.
 */
import { matches } from './checks';
import { DEFAULT_MAX_PRIORITY, DEFAULT_WEIGHT, limitsOf, sharesProblem } from './shares';
import type { Limits } from './shares';

/** A call in line for its turn (keeps its place: asking again never moves it). */
export interface Waiter {
  jobId: string;
  key: string;
  tool: string;
  /** The cap and rate scopes it is under, when it asked. */
  caps: string[];
  rates: string[];
  /** F4: 1 first … 5; the line is in this order, then in order of arrival. */
  priority: number;
  /** When it joined the line (ms, the workflow's clock). */
  since: number;
}

/** A permit given to a call whose turn came, until the node that runs it claims it. */
export interface Grant {
  jobId: string;
  key: string;
  caps: string[];
  /** Under a rate: the start it was given (ms). */
  at?: number;
  /** When the permit goes back, unclaimed (a job that ended without a word). */
  until: number;
}

export interface Holder {
  caps: Record<string, number>;
  /** When its permits go back unless it renews them (a node that died). */
  until: number;
}

export interface LimiterState {
  tenant: string;
  /** The limits as of the newest policy version any node (or `oz0 tenant set`) told. */
  settings: { version: number; limits: Limits };
  holders: Record<string, Holder>;
  grants: Grant[];
  queue: Waiter[];
  /** Per rate scope: the earliest time (ms) the next call may start. */
  next: Record<string, number>;
  /** The last gives applied, by id: a node that did not hear its give answered sends it again, and it counts once. */
  gives?: string[];
  /** The last permits taken, by the ask's id: a node that did not hear the answer hands them back by that id. */
  takes?: Array<{ id: string; holder: string; caps: string[] }>;
}

/** How many gives and takes the limiter remembers by id: far more than a node sends again within its deadline. */
export const REMEMBERED = 256;

/** A node's ask for a call's permits (and its tokens, under a rate). */
export interface TakeRequest {
  /** The ask's own id: a node that never heard the answer (its deadline passed) hands back what it took by it. */
  id: string;
  /** The node asking (its own queue's name): the permits are its own until it gives them back. */
  holder: string;
  /** How long its permits are kept without a renewal. */
  ttlMs: number;
  settings: LimiterState['settings'];
  call: { jobId: string; key: string; tool: string; server: string; priority: number };
}

/**
 * The call may start: its permits are the holder's now, and under a rate it starts at `at` (ms) at the earliest;
 * `waiting`: calls in line, by scope.
 */
export type TakeResult =
  | { ok: true; caps: string[]; at?: number; waiting: Record<string, number> }
  | { ok: false; position: number; why: string; waiting: Record<string, number> };

/** How long a grant waits for its call to be claimed before it goes back (its job ended without a word). */
export const GRANT_TTL_MS = 10 * 60_000;
/** A rate's start this near is kept by the node that takes it: Temporal's timers fire to about a second. */
export const PACE_MS = 1000;
/**
 * A rated call's start is this far off when given (at most half its rate's spacing): the answer reaches its node
 * first, so the call starts at its start, not late by the round trip (which would bring it nearer the next one).
 */
export const PACE_LEAD_MS = 100;

export function emptyLimiter(tenant: string): LimiterState {
  return { tenant, settings: { version: -1, limits: {} }, holders: {}, grants: [], queue: [], next: {} };
}

function sameCall(a: { jobId: string; key: string }, b: { jobId: string; key: string }): boolean {
  return a.jobId === b.jobId && a.key === b.key;
}

export class Limiter {
  constructor(readonly state: LimiterState) {}

  /** A newer policy version's limits replace the ones kept; an older one's are ignored. */
  adopt(settings: LimiterState['settings']): void {
    if (settings.version > this.state.settings.version) this.state.settings = settings;
  }

  /** Drops holders that stopped renewing and grants nobody claimed: their permits go back. */
  expire(now: number): void {
    for (const [id, holder] of Object.entries(this.state.holders))
      if (holder.until < now) delete this.state.holders[id];
    this.state.grants = this.state.grants.filter((g) => g.until >= now);
  }

  /** Permits of a cap scope held now: by nodes, and granted to calls not yet claimed. */
  running(scope: string): number {
    let n = 0;
    for (const holder of Object.values(this.state.holders)) n += holder.caps[scope] ?? 0;
    for (const grant of this.state.grants) if (grant.caps.includes(scope)) n++;
    return n;
  }

  /** The calls in line, by scope. */
  waiting(): Record<string, number> {
    const out: Record<string, number> = {};
    for (const w of this.state.queue) for (const scope of [...w.caps, ...w.rates]) out[scope] = (out[scope] ?? 0) + 1;
    return out;
  }

  private scopes(server: string) {
    const { caps, rates } = limitsOf(this.state.settings.limits, server);
    return { caps: Object.keys(caps), rates: Object.keys(rates), capOf: caps, rateOf: rates };
  }

  /**
   * The first scope that keeps a call from starting now, as the current limits have it (a rate: its next start is
   * more than {@link PACE_MS} off); undefined: it may start.
   */
  private blockedBy(w: Pick<Waiter, 'tool' | 'caps' | 'rates'>, now: number): string | undefined {
    const { capOf, rateOf } = this.scopes(w.tool.slice(0, w.tool.indexOf('.')));
    for (const scope of w.caps) if (capOf[scope] !== undefined && this.running(scope) >= capOf[scope]) return scope;
    for (const scope of w.rates)
      if (rateOf[scope] !== undefined && (this.state.next[scope] ?? 0) - now > PACE_MS) return scope;
    return undefined;
  }

  /**
   * The call's start under its rates (the latest of their next starts, at least {@link PACE_LEAD_MS} off or half a
   * spacing), and each rate's next start moves 1/rate on from it; now, for a call under no rate.
   */
  private spend(rates: string[], server: string, now: number): number {
    const { rateOf } = this.scopes(server);
    const spent = rates.filter((scope) => rateOf[scope] !== undefined);
    if (spent.length === 0) return now;
    const lead = Math.min(PACE_LEAD_MS, ...spent.map((scope) => 500 / rateOf[scope]));
    const at = Math.max(now + lead, ...spent.map((scope) => this.state.next[scope] ?? 0));
    for (const scope of spent) this.state.next[scope] = at + 1000 / rateOf[scope];
    return at;
  }

  /** The asking node holds the call's permits now, remembered by the ask's id. */
  private hold(req: Pick<TakeRequest, 'id' | 'holder' | 'ttlMs'>, caps: string[], now: number): void {
    const h = (this.state.holders[req.holder] ??= { caps: {}, until: now + req.ttlMs });
    h.until = Math.max(h.until, now + req.ttlMs);
    for (const scope of caps) h.caps[scope] = (h.caps[scope] ?? 0) + 1;
    if (caps.length)
      this.state.takes = [...(this.state.takes ?? []), { id: req.id, holder: req.holder, caps }].slice(-REMEMBERED);
  }

  /**
   * A node asks for a call's permits. A grant its turn brought is claimed; otherwise it starts now if nothing holds it
   * back and nobody ahead of it in line needs the same scopes, else it joins the line (or keeps its place there).
   */
  take(req: TakeRequest, now: number): TakeResult {
    this.adopt(req.settings);
    this.expire(now);
    const { call } = req;
    const granted = this.state.grants.findIndex((g) => sameCall(g, call));
    if (granted >= 0) {
      const [grant] = this.state.grants.splice(granted, 1);
      this.hold(req, grant.caps, now);
      return {
        ok: true,
        caps: grant.caps,
        ...(grant.at !== undefined ? { at: grant.at } : {}),
        waiting: this.waiting(),
      };
    }
    const { caps, rates } = this.scopes(call.server);
    const queued = this.state.queue.findIndex((w) => sameCall(w, call));
    const waiter: Waiter =
      queued >= 0
        ? this.state.queue[queued]
        : { jobId: call.jobId, key: call.key, tool: call.tool, caps, rates, priority: call.priority, since: now };
    const ahead = this.state.queue.filter((w, i) => (queued >= 0 ? i < queued : w.priority <= call.priority));
    const contested = ahead.some((w) => [...w.caps, ...w.rates].some((s) => caps.includes(s) || rates.includes(s)));
    const blocked = this.blockedBy({ tool: call.tool, caps, rates }, now);
    if (!contested && !blocked) {
      if (queued >= 0) this.state.queue.splice(queued, 1);
      this.hold(req, caps, now);
      const at = this.spend(rates, call.server, now);
      return { ok: true, caps, ...(at > now ? { at } : {}), waiting: this.waiting() };
    }
    if (queued < 0) this.enqueue(waiter);
    const position = this.state.queue.findIndex((w) => sameCall(w, call)) + 1;
    const scope = blocked ?? [...caps, ...rates].find((s) => ahead.some((w) => [...w.caps, ...w.rates].includes(s)))!;
    return { ok: false, position, why: this.why(scope), waiting: this.waiting() };
  }

  private enqueue(w: Waiter): void {
    const at = this.state.queue.findIndex((q) => q.priority > w.priority);
    if (at < 0) this.state.queue.push(w);
    else this.state.queue.splice(at, 0, w);
  }

  /** Why a call waits, in words: `acme's cap of 3 running calls`, `acme's rate of 2 calls a second to ledger`. */
  why(scope: string): string {
    const server = scope.startsWith('server:') ? scope.slice('server:'.length) : '';
    const { capOf, rateOf } = this.scopes(server);
    const parts = [
      ...(capOf[scope] !== undefined ? [`cap of ${capOf[scope]} running calls${server ? ` of ${server}` : ''}`] : []),
      ...(rateOf[scope] !== undefined
        ? [`rate of ${rateOf[scope]} calls a second${server ? ` to ${server}` : ''}`]
        : []),
    ];
    return `${this.state.tenant}'s ${parts.join(' and ') || 'limits'}`;
  }

  /**
   * A node gives back permits it no longer holds for a call, and renews the rest; and hands back what asks it never
   * heard answered took (`abandoned`, by their ids). A give sent again under the same id counts once.
   */
  give(input: GiveInput, now: number): void {
    const { holder, caps, ttlMs, id, abandoned } = input;
    const once = id !== undefined && (this.state.gives ?? []).includes(id);
    if (id !== undefined && !once) this.state.gives = [...(this.state.gives ?? []), id].slice(-REMEMBERED);
    if (!once) this.takeOff(holder, caps);
    for (const lost of abandoned ?? []) {
      const taken = (this.state.takes ?? []).find((t) => t.id === lost);
      if (!taken) continue;
      this.state.takes = this.state.takes!.filter((t) => t !== taken);
      this.takeOff(taken.holder, Object.fromEntries(taken.caps.map((c) => [c, 1])));
    }
    const h = this.state.holders[holder];
    if (h) h.until = now + ttlMs;
  }

  private takeOff(holder: string, caps: Record<string, number>): void {
    const h = this.state.holders[holder];
    if (!h) return;
    for (const [scope, n] of Object.entries(caps)) {
      h.caps[scope] = Math.max(0, (h.caps[scope] ?? 0) - n);
      if (h.caps[scope] === 0) delete h.caps[scope];
    }
    if (Object.keys(h.caps).length === 0) delete this.state.holders[holder];
  }

  /** A call in line that will not come for its turn (its job was cancelled, or it ended): out of line, grant back. */
  withdraw(call: { jobId: string; key: string }): void {
    this.state.queue = this.state.queue.filter((w) => !sameCall(w, call));
    this.state.grants = this.state.grants.filter((g) => !sameCall(g, call));
  }

  /** C5: calls in line whose tool a kill switch now covers leave it, so their jobs look again at once. */
  wake(kills: readonly string[]): Waiter[] {
    const woken = this.state.queue.filter((w) => kills.some((k) => matches(k, w.tool)));
    this.state.queue = this.state.queue.filter((w) => !woken.includes(w));
    return woken;
  }

  /**
   * Gives each call in line its turn, in order, while permits and rates allow (holders and grants past their time
   * first go back): a call that cannot start holds back the calls behind it that need the same scopes (they keep
   * their places). Returns the calls whose turn came. Under a rate, a call's turn comes once its start is within
   * {@link PACE_MS}; the node that asks after it every second brings that moment.
   */
  pump(now: number): Waiter[] {
    this.expire(now);
    const granted: Waiter[] = [];
    const held = new Set<string>();
    for (const w of [...this.state.queue]) {
      const scopes = [...w.caps, ...w.rates];
      if (scopes.some((s) => held.has(s))) continue;
      if (this.blockedBy(w, now)) {
        for (const s of scopes) held.add(s);
        continue;
      }
      this.state.queue.splice(this.state.queue.indexOf(w), 1);
      const at = this.spend(w.rates, w.tool.slice(0, w.tool.indexOf('.')), now);
      const grant: Grant = { jobId: w.jobId, key: w.key, caps: w.caps, until: now + GRANT_TTL_MS };
      this.state.grants.push(at > now ? { ...grant, at } : grant);
      granted.push(w);
    }
    return granted;
  }

  /** F5: what `oz0 tenant status` shows of the counting: running and waiting by scope, the limits they are held to. */
  status(): LimiterStatus {
    const scopes = new Set<string>();
    const { limits } = this.state.settings;
    for (const server of ['', ...Object.keys(limits.servers ?? {})]) {
      const { caps, rates } = limitsOf(limits, server);
      for (const s of [...Object.keys(caps), ...Object.keys(rates)]) scopes.add(s);
    }
    const waiting = this.waiting();
    for (const s of Object.keys(waiting)) scopes.add(s);
    return {
      version: this.state.settings.version,
      scopes: [...scopes].sort().map((scope) => ({
        scope,
        running: this.running(scope),
        waiting: waiting[scope] ?? 0,
      })),
      holders: Object.keys(this.state.holders).length,
      queue: this.state.queue.length,
    };
  }
}

export interface LimiterStatus {
  /** The policy version whose limits it holds calls to. */
  version: number;
  scopes: Array<{ scope: string; running: number; waiting: number }>;
  /** Nodes holding permits now. */
  holders: number;
  /** Calls in line, all scopes. */
  queue: number;
}

const HOLDER = /^[A-Za-z0-9_.:@/-]{1,300}$/;

function ttlProblem(ttlMs: unknown): string | undefined {
  return typeof ttlMs === 'number' && Number.isInteger(ttlMs) && ttlMs >= 1000 && ttlMs <= 3600_000
    ? undefined
    : 'ttlMs is a whole number of ms from 1000 to 3600000';
}

/** What is wrong with a node's ask for permits, if anything (the limiter's validator: any client could send one). */
export function takeProblem(req: unknown): string | undefined {
  if (!req || typeof req !== 'object' || Array.isArray(req)) return 'an ask is { id, holder, ttlMs, settings, call }';
  const { id, holder, ttlMs, settings, call } = req as Record<string, unknown>;
  if (typeof id !== 'string' || !ID.test(id)) return 'id is 1-64 letters, digits or -';
  if (typeof holder !== 'string' || !HOLDER.test(holder)) return 'holder is a node queue name';
  const ttl = ttlProblem(ttlMs);
  if (ttl) return ttl;
  const s = settings as { version?: unknown; limits?: unknown } | undefined;
  if (!s || typeof s.version !== 'number' || !s.limits || typeof s.limits !== 'object')
    return 'settings is { version, limits }';
  const limits = sharesProblem({ weight: DEFAULT_WEIGHT, maxPriority: DEFAULT_MAX_PRIORITY, limits: s.limits });
  if (limits) return limits;
  const c = call as Record<string, unknown> | undefined;
  if (!c || typeof c.jobId !== 'string' || !c.jobId || typeof c.key !== 'string' || !c.key)
    return 'call is { jobId, key, tool, server, priority }';
  if (typeof c.tool !== 'string' || typeof c.server !== 'string' || !c.tool.startsWith(`${c.server}.`))
    return "call's tool is <server>.<function>, of its server";
  if (typeof c.priority !== 'number' || !Number.isInteger(c.priority) || c.priority < 1 || c.priority > 5)
    return "call's priority is 1 to 5";
  return undefined;
}

const ID = /^[A-Za-z0-9-]{1,64}$/;

/** What is wrong with a node's give, if anything. */
export function giveProblem(input: unknown): string | undefined {
  if (!input || typeof input !== 'object' || Array.isArray(input)) return 'a give is { holder, caps, ttlMs, id }';
  const { holder, caps, ttlMs, id, abandoned } = input as Record<string, unknown>;
  if (typeof holder !== 'string' || !HOLDER.test(holder)) return 'holder is a node queue name';
  if (!caps || typeof caps !== 'object' || Array.isArray(caps)) return 'caps maps scopes to counts';
  for (const n of Object.values(caps))
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0) return 'caps maps scopes to counts';
  if (id !== undefined && (typeof id !== 'string' || !ID.test(id))) return 'id is 1-64 letters, digits or -';
  const lost = abandoned ?? [];
  if (!Array.isArray(lost) || lost.length > REMEMBERED || lost.some((a) => typeof a !== 'string' || !ID.test(a)))
    return `abandoned is a list of at most ${REMEMBERED} ask ids`;
  return ttlProblem(ttlMs);
}

/** A node's give: permits back (relative), its renewal, and the asks it never heard answered. */
export interface GiveInput {
  holder: string;
  /** Permits given back, by scope (relative: a give never undoes a take that crossed it). */
  caps: Record<string, number>;
  ttlMs: number;
  /** The give's own id: sent again after no answer, it counts once. */
  id?: string;
  /** Ids of this node's asks whose answers it never heard: what they took goes back. */
  abandoned?: string[];
}
