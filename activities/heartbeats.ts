/**
 * How a running activity's heartbeats are paced (issue 26). A heartbeat carries two things:
 * - what the call knows and the next attempt needs (progress P1-P3, resume tokens, task ids, sandboxes' queues);
 * - that the node is alive: a node that stops heartbeating for the heartbeat timeout is taken as lost (T4).
 * Where the server pushes cancels to this node (worker commands), that is all it carries, and it is paced by those
 * two needs. Where it does not, a cancel reaches an activity only in the answer to a heartbeat, so every running
 * activity beats every `node.heartbeatMs` as before.
 */
import type { Context } from '@temporalio/activity';

/** How a cancel reaches this node's activities: pushed by the server, or in a heartbeat's answer. */
export type CancelWay = 'push' | 'heartbeat';

/**
 * A change worth carrying (progress, a token) goes out at most this often with push: the UI and a next attempt
 * after a lost node see progress at most a second old. The first beat of an attempt goes out at once (the SDK
 * throttles from the second on), and that is where a task id or a sandbox's queue first appears.
 */
export const CARRY_MS = 1000;

/**
 * With push, a call with nothing new beats this many times per heartbeat timeout: two beats may be late (a loaded
 * machine, a GC pause, the SDK's throttle holding the last one back) before the node is taken as lost.
 */
export const BEATS_PER_TIMEOUT = 3;

/** The node's cancel way, decided at start (worker/cancel-way.ts) and read by each activity as it starts. */
export class CancelRoute {
  way: CancelWay = 'heartbeat';
  /** Why: the words the node said at start. */
  why = 'not yet known: the node is starting';
  /** The start probe's activity on this node, while one runs: it says when it runs and when its cancel came. */
  probe?: { started(): void; heard(): void };
  private settle!: () => void;
  /** Resolves once the node has decided its way (worker/cancel-way.ts). */
  readonly decided = new Promise<void>((resolve) => (this.settle = resolve));

  constructor(
    /** `node.heartbeatMs`: the period without push, the floor with it. */
    readonly heartbeatMs: number,
  ) {}

  /** The way is known now (it changes no more). */
  decide(way: CancelWay, why: string): void {
    this.way = way;
    this.why = why;
    this.settle();
  }

  /** The pace of one activity's heartbeats, for the way cancels reach it now and its heartbeat timeout. */
  pace(heartbeatTimeoutMs: number | undefined): Pace {
    if (this.way === 'heartbeat') return { idleMs: this.heartbeatMs, carryMs: 0 };
    const liveness = heartbeatTimeoutMs ? Math.floor(heartbeatTimeoutMs / BEATS_PER_TIMEOUT) : 60_000;
    return { idleMs: Math.max(this.heartbeatMs, liveness), carryMs: CARRY_MS };
  }
}

export interface Pace {
  /** A beat goes out this long after the last one, whether or not anything changed. */
  idleMs: number;
  /** A change goes out now if the last beat is this old, else when it is (0: at once, the SDK throttles). */
  carryMs: number;
}

/**
 * One activity's heartbeats: a beat every `idleMs` from its start (none up front: Temporal already holds what the
 * attempts before left), and a change carried within `carryMs`.
 */
export class Pulse {
  private last = 0;
  private idle?: NodeJS.Timeout;
  private carry?: NodeJS.Timeout;
  private stopped = false;

  constructor(
    private readonly ctx: Context,
    private readonly pace: Pace,
    private readonly details: () => unknown = () => undefined,
  ) {
    this.arm();
  }

  /**
   * Something the heartbeat carries changed. `now`: a fact a next attempt must not miss (a task id, a sandbox's
   * queue) goes out at once, as far as the SDK's throttle (`node.heartbeatMs`) lets it.
   */
  beat(now = false): void {
    if (this.stopped) return;
    const wait = now ? 0 : this.last + this.pace.carryMs - Date.now();
    if (wait <= 0) return this.send();
    this.carry ??= setTimeout(() => this.send(), wait);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.idle);
    clearTimeout(this.carry);
  }

  private send(): void {
    clearTimeout(this.carry);
    this.carry = undefined;
    if (this.stopped) return;
    this.last = Date.now();
    this.ctx.heartbeat(this.details());
    this.arm();
  }

  private arm(): void {
    clearTimeout(this.idle);
    this.idle = setTimeout(() => this.send(), this.pace.idleMs);
  }
}
