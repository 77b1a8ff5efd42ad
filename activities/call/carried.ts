/**
 * What one attempt carries of its call (P1-P5, T3, C7): the call's state as the attempts before left it, which this
 * attempt's heartbeats carry on (for the UI, and for the next attempt, at the pace of ../heartbeats.ts) and its end
 * hands on; and this attempt's own line in the trace, written when it ends: its notes and its last progress.
 */
import type { Context } from '@temporalio/activity';
import type { CallProgressState, Outcome, Progress } from '../../model/schemas';
import type { CallInput } from '../../model/activities';
import type { ServerConnection, TaskSeen } from '../../mcp';
import { Pulse } from '../heartbeats';
import type { Pace } from '../heartbeats';
import { IGNORED_TOKEN, progressed, readPriorState } from './resume';
import type { ProgressNote } from './resume';
import { lineOf } from './settle';
import type { Ending } from './settle';

/**
 * The call's attempt number: Temporal's, plus the attempts made before its activity was scheduled anew after a wait
 * for its turn (F2, F3: a wait uses no attempt).
 */
export function attemptOf(ctx: Pick<Context, 'info'>, call: Pick<CallInput, 'before'>): number {
  return ctx.info.attempt + (call.before?.attempts ?? 0);
}

export class Carried {
  /** What the heartbeat carries: the call, its progress and the attempts so far, for the UI and the next attempt. */
  readonly state: CallProgressState;
  private readonly attempt: number;
  private progress?: Progress;
  /** P5: how this attempt started (resumed, or started over and why), tokens it ignored, and what it met on the way. */
  private readonly notes: string[] = [];
  private readonly pulse: Pulse;

  constructor(
    private readonly ctx: Context,
    pace: Pace,
    call: Pick<CallInput, 'tool' | 'key' | 'before'>,
  ) {
    this.attempt = attemptOf(ctx, call);
    // F2, F3: the first attempt after a wait carries on what the attempts before it left, as a heartbeat would.
    const details = ctx.info.attempt === 1 && call.before ? call.before.state : ctx.info.heartbeatDetails;
    this.state = { ...readPriorState(details, this.attempt), tool: call.tool, key: call.key };
    // No heartbeat up front: Temporal already holds what the attempts before left, and an attempt that ends without
    // a word is read as lost. A call that runs longer than its pace's idle period beats from then on.
    this.pulse = new Pulse(ctx, pace, () => this.state);
  }

  /** Words for this attempt's line in the trace. */
  note(...notes: string[]): void {
    this.notes.push(...notes);
  }

  /** The server that serves this attempt: its protocol, and (C7) this node's queue when it runs in a sandbox here. */
  served(connection: Pick<ServerConnection, 'kind' | 'protocol'>, queue: string): void {
    this.state.protocol = connection.protocol;
    if (connection.kind !== 'sandbox' || this.state.sandboxQueues?.includes(queue)) return;
    // Said at once, in a heartbeat: a node cut off before its answer arrives still gets its sandbox stopped.
    this.state.sandboxQueues = [...(this.state.sandboxQueues ?? []), queue];
    this.pulse.beat(true);
  }

  /**
   * P1, P3: a progress notification for this attempt's request goes in the heartbeat; resolves to the progress when
   * it is news. Its resume token counts only from a function that takes tokens (`takesTokens`).
   */
  progressed(n: ProgressNote, takesTokens: boolean): Progress | undefined {
    const news = progressed(this.progress, n, takesTokens);
    if (!news) return undefined;
    this.progress = news.progress;
    Object.assign(this.state, news.carried);
    if (news.invalidToken && !this.notes.includes(IGNORED_TOKEN)) this.notes.push(IGNORED_TOKEN);
    this.pulse.beat();
    return this.progress;
  }

  /** The call's task, made or found, and each status after: in the heartbeat at once, for the next attempt. */
  taskSeen(task: TaskSeen, protocol: string): void {
    if (!this.state.task) this.notes.push(`task ${task.taskId}`);
    this.state.task = { id: task.taskId, status: task.status, protocol: this.state.task?.protocol ?? protocol };
    this.pulse.beat(true);
  }

  /** The ending's facts for the next attempt (a task gone, nothing sent), then this attempt's line, with `notes`. */
  ended(ending: Ending, notes: readonly string[]): void {
    if (ending.forgetTask) this.state.task = undefined;
    if (ending.unsent) this.state.unsent = [...(this.state.unsent ?? []), this.attempt];
    const line = lineOf(this.attempt, ending, [...this.notes, ...notes], this.progress);
    this.state.attempts = [...this.state.attempts, line];
  }

  /** This attempt's outcome, as its line in the trace says; none before it ended, or when it only asked a person. */
  outcome(): Outcome | undefined {
    const line = this.state.attempts.at(-1);
    return line?.attempt === this.attempt ? line.outcome : undefined;
  }

  /**
   * The next attempt reads what this one left from the last heartbeat (P2): the record goes out in one, now (the
   * failure that ends the attempt carries it too, as its details), and no beat after it.
   */
  handOn(): void {
    this.pulse.stop();
    this.ctx.heartbeat(this.state);
  }

  /** The attempt is over: no more beats. */
  stopBeating(): void {
    this.pulse.stop();
  }
}
