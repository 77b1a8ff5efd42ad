/**
 * One attempt of one call: one MCP `tools/call`, with its key, its time limit, its cancellation and its heartbeats.
 * Temporal's activity retry is the only retry layer (B5): an attempt never tries twice.
 *
 * An attempt reads top to bottom in three phases, its state held by one {@link Attempt}:
 * - prepare: a lease on the server, its listing, the tenant's policy verdict (./policy-check.ts), whether the call
 *   may be made again, and the resume plan (nothing is sent yet, so every failure here says so); a call whose verdict
 *   is `confirm` and that no person approved yet ends here, sending nothing, and its job asks (A4);
 * - send: the request, with its stop (job cancel, kill switch, time limit, node shutdown) and its progress; a function
 *   that runs as an MCP task is called now and followed to its end (mcp/task.ts), and a later attempt polls that task;
 * - settle: the outcome, decided by ./settle.ts's rules, then carried out: its record in the trace, and what Temporal
 *   is told (an answer, a retry, or the end).
 */
import { ApplicationFailure, CancelledFailure, Context } from '@temporalio/activity';
import type { CallToolResult, Tool } from '@modelcontextprotocol/client';
import { splitTool } from '../../model/checks';
import { FailureType } from '../../model/activities';
import type { CallAsks, CallInput, CallOutput, CallWaits } from '../../model/activities';
import { AskedForInput, TaskGone, cancelTask, makeCall } from '../../mcp';
import type { TenantCredential } from '../../mcp';
import { functionOf, listingFailure, notAuthorizedBy, refusalNotes, refusedBeforeLease } from './listing';
import type { CallDeps } from './deps';
import { perTenant } from '../../common/config';
import type { Lease, ServerConnection } from '../pool';
import { AttemptWatch } from '../observe/attempt';
import { Carried, attemptOf } from './carried';
import type { ProgressNote } from './resume';
import { requestOf, requestPlan } from './plan';
import type { RequestPlan } from './plan';
import { AsksPerson, asksPerson, checkPolicy, readTenantPolicy, waitsTurn } from './policy-check';
import { MustWait } from '../policy/shares';
import type { Admission } from '../policy/shares';
import type { PolicyRead } from '../policy/gate';
import { AttemptEnd, Unsent, outputOf, settleAnswer, settleStop, settleTaskGone, settleUnknown } from './settle';
import { handOn, handed, sizeOf } from './answer';
import type { AnswerFacts, AttemptFacts, Ending } from './settle';
import { hearStops, hearTimeLimit, temporalCancel } from './stops';
import type { StopCause } from './stops';

/** I6: the trace's word for a call on a sandboxed server that ran as a plain process. */
export const UNISOLATED = 'ran unisolated (node.isolation: "none")';

/** What prepare hands to send. */
interface Prepared extends RequestPlan {
  connection: ServerConnection;
  fn: string;
  /** The listing of the function, as oz0 read it this attempt. */
  tool: Tool;
}

export function callToolAttempt(deps: CallDeps, input: CallInput): Promise<CallOutput | CallAsks | CallWaits> {
  return new Attempt(deps, input).run();
}

class Attempt {
  private readonly ctx = Context.current();
  private readonly n: number;
  private readonly last: boolean;
  /** C6: the attempt's clock starts when it got its slot on the node, i.e. now. */
  private readonly startedAt = Date.now();
  /** The call's state, which the heartbeats carry, and this attempt's line in the trace (./carried.ts). */
  private readonly carried: Carried;
  /** One request per attempt, so one stop: a fresh controller (a shared signal would leak listeners). */
  private readonly controller = new AbortController();
  private stopCause?: StopCause;
  private lease?: Lease;
  /** F2, F3: the call may go on now: the slot it was given, and its tenant's permits, until it ends. */
  private admission?: Admission;
  /** SPEC "Words": this call may be made again; known once prepare has read the listing and the policy. */
  private again = false;
  /** The function only reads: a task of it that its server lost may be made anew. */
  private readOnly = false;
  private sent = false;
  /** D1: what the answer weighs, once it came, and the node's bound. */
  private size?: AnswerFacts;
  /** R1-R2: the tenant's own credential, when the server takes tenants' credentials. */
  private credential?: TenantCredential;
  /** O1-O3: this attempt's series and spans. */
  private readonly watch: AttemptWatch;

  constructor(
    private readonly deps: CallDeps,
    private readonly input: CallInput,
  ) {
    this.n = attemptOf(this.ctx, input);
    this.last = this.n >= input.maxAttempts;
    this.watch = new AttemptWatch(deps.metrics, input, this.n, deps.release);
    this.watch.dispatched(this.ctx.info.currentAttemptScheduledTimestampMs);
    this.carried = new Carried(this.ctx, deps.route.pace(this.ctx.info.heartbeatTimeoutMs), input);
  }

  /** The attempt, and what it tells observability when it ends: its outcome, and whether a next attempt follows. */
  async run(): Promise<CallOutput | CallAsks | CallWaits> {
    try {
      const out = await this.attempt();
      this.watch.ended('result' in out ? this.carried.outcome() : undefined, true);
      return out;
    } catch (err) {
      const retried = err instanceof ApplicationFailure && !err.nonRetryable && !this.last;
      this.watch.ended(this.carried.outcome() ?? 'failed', !retried);
      throw err;
    }
  }

  /**
   * prepare → send → settle, with the attempt's stops (job cancel, kill switch, its session's caller) heard around
   * them; a call that waits for a person's yes ends after prepare, and its job asks (A4); so does one that may not go
   * on now (F2, F3), having sent nothing, and its job waits. One async frame for the three: each more is a promise or
   * two of every call (issue 36.7).
   */
  private async attempt(): Promise<CallOutput | CallAsks | CallWaits> {
    // C5: heard before the policy is read, so a kill switch thrown from here on stops this call too.
    const { gate, relay, follows } = this.deps;
    const unhear = hearStops({ gate, relay, follows, ctx: this.ctx }, this.input, (why) => this.stop(why));
    try {
      let ending: Ending;
      try {
        const prepared = await this.prepare();
        const answer = await this.send(prepared);
        this.size = sizeOf(answer, this.deps);
        ending = settleAnswer(answer, { ...this.facts(), ...this.size });
      } catch (err) {
        if (err instanceof AsksPerson) return this.asks(err.pattern);
        if (err instanceof MustWait && !this.stopCause) {
          this.watch.waits(err.kind, err.why);
          return waitsTurn(this.deps, this.input, err, { attempts: this.n - 1, state: this.carried.state });
        }
        ending = this.settleFailure(err);
      }
      return await this.end(ending);
    } finally {
      unhear();
      this.carried.stopBeating();
      this.lease?.release();
      this.admission?.release();
    }
  }

  // ---- prepare: lease, listing, policy verdict, resume plan; nothing is sent ----

  private async prepare(): Promise<Prepared> {
    const { deps, input } = this;
    const { server, fn } = splitTool(input.tool);
    const read = await readTenantPolicy(deps, input, this.n);
    const { connection, tools } = await this.list(server);
    this.carried.served(connection, deps.node.queue);
    // I6: a sandboxed server that is not isolated is said on every attempt it serves.
    if (connection.kind === 'sandbox' && !connection.isolated) this.carried.note(UNISOLATED);
    const tool = await functionOf(deps.pool, server, fn, tools, input.tenant);
    this.watch.listed(true, true);
    const { kind } = connection;
    const remote = kind === 'remote';
    const { approved } = await checkPolicy(deps, { input, attempt: this.n, server, tools, remote, read });
    const stopped = this.stopCause !== undefined;
    const prior = this.carried.state;
    const plan = requestPlan({ call: input, attempt: this.n, tool, connection, approved, prior, stopped });
    ({ again: this.again, readOnly: this.readOnly } = plan);
    this.carried.note(...plan.notes);
    await this.admit(server, read);
    // A7: a live session's caller that heard the call wait for a person hears now that it goes on.
    if (input.relay) deps.relay.waiting(input.jobId, input.relay.callId, undefined);
    return { connection, fn, tool, ...plan };
  }

  /**
   * F2, F3, last before the request: the call may go on now (the slot it was given, its tenant's caps and rates), or
   * it waits ({@link MustWait}), having sent nothing; its lease goes back as the attempt ends. Last, so a call refused
   * by its policy, or waiting for a person, never waits in line too, and a rate spaces the requests themselves.
   */
  private async admit(server: string, read: PolicyRead): Promise<void> {
    const { deps, input } = this;
    const queue = this.ctx.info.taskQueue;
    try {
      const first = this.ctx.info.attempt === 1;
      this.admission = await deps.shares.admit(
        { input, server, queue, state: read.state, first },
        this.controller.signal,
      );
    } catch (err) {
      if (err instanceof MustWait) throw err;
      // Its tenant's limiter did not answer (no node runs the policy queue, Temporal is away): nothing was sent.
      const message = `could not reach the limiter of ${input.tenant}: ${(err as Error).message}`;
      throw new Unsent(message, message);
    }
  }

  /** A lease on the call's server, and its listing (./listing.ts says how they end when they cannot be had). */
  private async list(server: string): Promise<{ connection: ServerConnection; tools: Tool[] }> {
    const { deps, input } = this;
    const refused = refusedBeforeLease(deps.pool, server, input);
    if (refused) throw refused;
    if (perTenant(deps.pool.serverConfig(server)!)) this.credential = deps.pool.credentials.of(server, input.tenant);
    this.watch.listed(true, false);
    try {
      const { connection } = (this.lease = await deps.pool.acquire(server, this.owner()));
      // A remote listing is read anew for every call, so a change is caught even without list_changed (A2).
      return { connection, tools: await connection.listTools(connection.kind === 'remote') };
    } catch (err) {
      throw listingFailure(err, this.credential, input, this.last);
    }
  }

  /** The job whose call this is, of its tenant: a sandboxed server is that job's own. */
  private owner() {
    return { tenant: this.input.tenant, jobId: this.input.jobId };
  }

  // ---- send: the request, its stop, its progress ----

  private async send(p: Prepared): Promise<CallToolResult> {
    const { input } = this;
    const limit = hearTimeLimit(input.timeoutSeconds, this.startedAt, (why) => this.stop(why));
    // P1: a call that may be made again asks for progress, under a token of its own; so does one whose live session's
    // caller asked for it (H6), and one that runs as a task, which a later attempt follows too.
    const progressToken = this.again || input.relay?.progress || p.asTask ? `oz0:${input.key}:${this.n}` : undefined;
    const unwatch = progressToken ? p.connection.watchProgress(progressToken, (n) => this.onProgress(n, p)) : undefined;
    // O2-O3: the MCP client span; its traceparent goes in _meta, so the server's spans are its children.
    const mcp = this.watch.toolsCall(p.fn, p.connection);
    const request = requestOf(p, input, { ...mcp.meta, ...(progressToken ? { progressToken } : {}) });
    // The request never outlives the attempt's own limit; never the SDK's 60 s default.
    const timeoutMs = Math.max(1, limit.remainingMs) + 5000;
    const signal = this.controller.signal;
    this.sent = true;
    try {
      const result = await mcp.within(() =>
        makeCall({
          connection: p.connection,
          tool: p.tool,
          params: request,
          asTask: p.asTask,
          priorTask: this.carried.state.task,
          ttlMs: input.timeoutSeconds * input.maxAttempts * 1000,
          signal,
          timeoutMs,
          onTask: (task) => this.carried.taskSeen(task, p.connection.protocol),
        }),
      );
      mcp.end(result);
      this.carried.note(...refusalNotes(this.credential, input.key));
      return result;
    } catch (err) {
      mcp.end(undefined, err, this.stopCause?.outcome);
      if (err instanceof AskedForInput) return await this.asked(err, p);
      throw err;
    } finally {
      unwatch?.();
      limit.unhear();
    }
  }

  /** The first stop names the cause; the MCP request is cancelled with its words as the reason (C2). */
  private stop(why: StopCause): void {
    this.watch.stopping();
    this.stopCause ??= why;
    this.controller.abort(this.stopCause.text);
  }

  /** P1, P3: a progress notification for this attempt's request: in the heartbeat, and to a live session's caller. */
  private onProgress(n: ProgressNote, p: Prepared): void {
    const progress = this.carried.progressed(n, p.takesTokens);
    if (progress && this.input.relay) this.deps.relay.report(this.input.jobId, this.input.relay.callId, progress);
  }

  /**
   * Issue 25.5: the server asked for an elicitation or a sampling (or refused the call without one). Nobody will
   * answer: the call ends with an error result that names it, and a task left waiting for the answer is cancelled.
   */
  private async asked(err: AskedForInput, p: Prepared): Promise<CallToolResult> {
    this.carried.note(err.note());
    const task = this.carried.state.task;
    if (task && task.status !== 'completed' && task.status !== 'failed' && task.status !== 'cancelled') {
      this.carried.note(await cancelTask(p.connection, task));
    }
    return err.result();
  }

  // ---- settle: the outcome (./settle.ts decides it), its record, what Temporal is told ----

  /** What settle reads of this attempt. */
  private facts(): AttemptFacts {
    const { input, again, last, sent, readOnly } = this;
    const task = this.carried.state.task !== undefined;
    const sandbox = this.lease?.connection.kind === 'sandbox';
    return { tool: input.tool, key: input.key, again, last, sent, task, readOnly, sandbox };
  }

  /** No answer for the job: prepare ended the attempt, a stop cut the request, or the request failed. */
  private settleFailure(err: unknown): Ending {
    if (err instanceof AttemptEnd) return err.ending;
    if (this.stopCause) return settleStop(this.stopCause, this.facts());
    if (err instanceof TaskGone) return settleTaskGone(err.message, this.facts());
    // R4: refused before the server ran it (a token that could not be had, a 401 or 403 past a new token); not so
    // once a task was made, which the next attempt follows.
    const refused = this.carried.state.task ? undefined : notAuthorizedBy(err, this.credential, this.input, this.last);
    if (refused) return refused.ending;
    // I4: the server's sandbox went past a limit and was stopped: said by name, not as a closed connection.
    const limit = this.lease?.connection.stoppedFor();
    const message = limit ? `its sandbox was stopped: past ${limit}` : ((err as Error).message ?? String(err));
    this.deps.logger.warn({ tool: this.input.tool, key: this.input.key, err: message }, 'attempt failed');
    return settleUnknown(message, this.facts());
  }

  /** Carries out the ending: its steps, this attempt's line in the trace, then the answer or what Temporal is told. */
  private async end(settled: Ending): Promise<CallOutput> {
    const { connection } = this.lease ?? {};
    const { state } = this.carried;
    // D1-D3: an answer goes on as the job's step will hold it: itself, or its claim in the payload store.
    const { ending, result, whole } =
      'answer' in settled
        ? await handOn(this.deps, this.input, this.ctx.info.workflowExecution?.runId, settled, {
            ...this.facts(),
            bytes: this.size?.bytes ?? 0,
          })
        : { ending: settled };
    if (ending.cancelTask && state.task && connection) this.carried.note(await cancelTask(connection, state.task));
    if (ending.stopSandbox && connection) await this.deps.pool.stopSandbox(connection.server, this.owner());
    // I3: a destination its sandbox's network refused while it ran is said too (the server may only see a 502).
    this.carried.ended(ending, connection?.refusedSince(this.startedAt) ?? []);
    if ('answer' in ending) return handed(outputOf(result!, state, this.deps.node.id), whole);
    if ('cancelled' in ending) {
      if (this.stopCause?.beforeTemporal) {
        this.watch.stopped();
        await temporalCancel(this.ctx, this.input.tool, state);
      }
      throw new CancelledFailure(ending.note, [state]);
    }
    const { type, retryable, message, nextRetryDelayMs } = ending.failure;
    if (type === FailureType.busy) this.watch.busyWait(nextRetryDelayMs);
    // P2: the next attempt reads what this one left from the last heartbeat: it goes out now.
    if (retryable) this.carried.handOn();
    throw ApplicationFailure.create({
      type,
      message: message ?? ending.note,
      nonRetryable: !retryable,
      nextRetryDelay: nextRetryDelayMs,
      details: [state],
    });
  }

  /** A4: the job asks a person (./policy-check.ts); a live session's caller hears that the call waits. */
  private asks(pattern: string): CallAsks {
    const { sandboxQueues } = this.carried.state;
    return asksPerson(this.deps, this.input, pattern, this.ctx.info.activityId, sandboxQueues);
  }
}
