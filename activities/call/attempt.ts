/**
 * One attempt of one call: one MCP `tools/call`, with its key, its time limit, its cancellation and its heartbeats.
 * Temporal's activity retry is the only retry layer (B5): an attempt never tries twice.
 *
 * An attempt reads top to bottom in three phases, its state held by one {@link Attempt}:
 * - prepare: a lease on the server, its listing, the tenant's policy verdict, whether the call may be made again,
 *   and the resume plan (nothing is sent yet, so every failure here says so); a call whose verdict is `confirm` and
 *   that no person approved yet ends here, sending nothing, and its job asks (A4);
 * - send: the request, with its stop (job cancel, kill switch, time limit, node shutdown) and its progress; a function
 *   that runs as an MCP task is called now and followed to its end (mcp/task.ts), and a later attempt polls that task;
 * - settle: the outcome, its record in the trace, and what Temporal is told (an answer, a retry, or the end).
 */
import { ApplicationFailure, CancelledFailure, Context } from '@temporalio/activity';
import type { ActivityCancellationDetails } from '@temporalio/common';
import type { CallToolResult, Tool } from '@modelcontextprotocol/client';
import { redactSecrets } from '../../common/logger';
import type { Logger } from '../../common/logger';
import {
  IDEMPOTENCY_KEY_META,
  RESUME_META,
  busyOf,
  declaresResume,
  resumeTokenOf,
  withoutReservedMeta,
} from '../../model/protocol';
import type { CallProgressState, Outcome, Progress, ResumeRequest } from '../../model/schemas';
import { splitTool } from '../../model/checks';
import { FailureType } from '../../model/activities';
import type { CallAsks, CallInput, CallOutput } from '../../model/activities';
import { listingDigest, verdict } from '../../model/policy-rules';
import type { Verdict } from '../../model/policy-rules';
import type { PolicyGate, PolicyRead } from '../policy/gate';
import {
  AskedForInput,
  OutcomeUnknown,
  TaskGone,
  cancelTask,
  hiddenFunctions,
  hiddenWhy,
  makeCall,
  taskPlan,
  taskSupportOf,
} from '../../mcp';
import type { Lease, ServerConnection, ServerPool } from '../pool';
import type { CallRelay } from './relay';
import { AttemptWatch } from '../observe/attempt';
import type { NodeMetrics } from '../observe/metrics';
import { Pulse } from '../heartbeats';
import type { CancelRoute } from '../heartbeats';
import { readPriorState, resumePlan } from './resume';
import type { TaskSeen } from '../../mcp';
import { attemptLimitMs, busyVerdict, mayBeMadeAgain } from './verdicts';

export interface NodeIdentity {
  /** Human-readable name of this node, e.g. `host/1234`. */
  id: string;
  /** This node's own task queue (sandbox clean-up, sessions). */
  queue: string;
}

export interface CallDeps {
  pool: ServerPool;
  gate: PolicyGate;
  /** A first attempt may use a policy read this recent; a retry always reads it anew (B6). */
  policyMaxAgeMs: number;
  logger: Logger;
  node: NodeIdentity;
  /** How cancels reach this node, and so how often a running attempt heartbeats (./heartbeats.ts). */
  route: CancelRoute;
  /** Live sessions' calls on this node: their callers stop them and hear their progress through it (H5, H6). */
  relay: CallRelay;
  /** O1: the node's series, when it serves them. */
  metrics?: NodeMetrics;
}

/** An answer larger than this is not handed to the job: it would not fit Temporal's history. */
export const MAX_RESULT_BYTES = 1024 * 1024;

const IGNORED_TOKEN = 'ignored an invalid resume token';
/** I6: the trace's word for a call on a sandboxed server that ran as a plain process. */
export const UNISOLATED = 'ran unisolated (node.isolation: "none")';
/** A question shows this much of a call's arguments (JSON); the rest is cut. */
export const QUESTION_ARGS_CHARS = 2000;

/** Why an attempt's request was stopped, in the trace's words; the first cause wins. */
interface StopCause {
  outcome: Outcome;
  text: string;
  /** A live session's caller stopped this call (H5): it ends here, and the job goes on. */
  bySession?: true;
}

/** Why Temporal asked the activity to stop, from its cancellation details (never from message text). */
export function cancelCause(details: ActivityCancellationDetails | undefined): StopCause {
  if (details?.cancelRequested) return { outcome: 'cancelled', text: 'oz0: job cancelled' };
  if (details?.workerShutdown) return { outcome: 'lost', text: 'oz0: node shutting down' };
  if (details?.timedOut) return { outcome: 'timeout', text: "oz0: Temporal's timeout for the attempt passed" };
  if (details?.paused) return { outcome: 'failed', text: 'oz0: the call was paused in Temporal' };
  if (details?.reset) return { outcome: 'failed', text: 'oz0: the call was reset in Temporal' };
  if (details?.notFound) return { outcome: 'cancelled', text: 'oz0: Temporal no longer knows this attempt' };
  return { outcome: 'cancelled', text: 'oz0: stopped by Temporal' };
}

/** An attempt that prepare ended before anything was sent, or settle ended without an answer for the job. */
class AttemptEnd extends Error {
  constructor(
    readonly outcome: Outcome,
    readonly note: string,
    readonly failure: { type: string; retryable: boolean; message?: string },
  ) {
    super(failure.message ?? note);
  }
}

/** A4: the call's verdict is `confirm` and no person approved it yet: nothing was sent, and its job asks. */
class AsksPerson extends Error {
  constructor(readonly pattern: string) {
    super(`waits for a person's yes (${pattern}: confirm)`);
  }
}

/** What prepare hands to send. */
interface Prepared {
  connection: ServerConnection;
  fn: string;
  /** P3: `_meta["oz0/resume"]` for this request, when it goes on from an earlier attempt. */
  resume?: ResumeRequest;
  /** P3/P6: progress tokens are taken from this function (a remote one that declares resume). */
  takesTokens: boolean;
  /**
   * The call runs as an MCP task (mcp/task.ts): made now and followed, or the task an attempt before made, polled; or
   * its server takes tasks as the extension and may answer it with one.
   */
  asTask: boolean;
  /** The listing of the function, as oz0 read it this attempt. */
  tool: Tool;
}

export function callToolAttempt(deps: CallDeps, input: CallInput): Promise<CallOutput | CallAsks> {
  return new Attempt(deps, input).run();
}

class Attempt {
  private readonly ctx = Context.current();
  private readonly n = this.ctx.info.attempt;
  private readonly last: boolean;
  /** C6: the attempt's clock starts when it got its slot on the node, i.e. now. */
  private readonly startedAt = Date.now();
  /** What the heartbeat carries: the call, its progress and the attempts so far, for the UI and the next attempt. */
  private readonly state: CallProgressState;
  private progress?: Progress;
  /** P5: how this attempt started (resumed, or started over and why), and tokens it ignored. */
  private readonly notes: string[] = [];
  /** One request per attempt, so one stop: a fresh controller (a shared signal would leak listeners). */
  private readonly controller = new AbortController();
  private stopCause?: StopCause;
  private lease?: Lease;
  /** SPEC "Words": this call may be made again; known once prepare has read the listing and the policy. */
  private again = false;
  /** The function only reads: a task of it that its server lost may be made anew. */
  private readOnly = false;
  private sent = false;
  /** O1-O3: this attempt's series and spans. */
  private readonly watch: AttemptWatch;
  private pulse?: Pulse;

  constructor(
    private readonly deps: CallDeps,
    private readonly input: CallInput,
  ) {
    this.last = this.n >= input.maxAttempts;
    this.state = { ...readPriorState(this.ctx.info.heartbeatDetails, this.n), tool: input.tool, key: input.key };
    this.watch = new AttemptWatch(deps.metrics, input, this.n);
  }

  /** The attempt, and what it tells observability when it ends: its outcome, and whether a next attempt follows. */
  async run(): Promise<CallOutput | CallAsks> {
    try {
      const out = await this.attempt();
      this.watch.ended('asks' in out ? undefined : this.outcome(), true);
      return out;
    } catch (err) {
      const retried = err instanceof ApplicationFailure && !err.nonRetryable && !this.last;
      this.watch.ended(this.outcome() ?? 'failed', !retried);
      throw err;
    }
  }

  /** This attempt's outcome, as its line in the trace says. */
  private outcome(): Outcome | undefined {
    const line = this.state.attempts.at(-1);
    return line?.attempt === this.n ? line.outcome : undefined;
  }

  private async attempt(): Promise<CallOutput | CallAsks> {
    const { ctx } = this;
    // No heartbeat up front: Temporal already holds what the attempts before left, and an attempt that ends without
    // a word is read as lost. A call that runs longer than its pace's idle period beats from then on.
    this.pulse = new Pulse(ctx, this.deps.route.pace(ctx.info.heartbeatTimeoutMs), () => this.state);
    // C5: registered before the policy is read, so a kill switch thrown from here on stops this call too.
    const unregister = this.deps.gate.register({
      tenant: this.input.tenant,
      tool: this.input.tool,
      stop: (why) => this.stop({ outcome: 'killed', text: why }),
    });
    const onCancel = () => this.stop(cancelCause(ctx.cancellationDetails));
    if (ctx.cancellationSignal.aborted) onCancel();
    else ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
    const { relay } = this.input;
    const unrelay = relay
      ? this.deps.relay.register(this.input.jobId, relay.callId, (why) =>
          this.stop({ outcome: 'cancelled', text: `oz0: cancelled by its session: ${why}`, bySession: true }),
        )
      : undefined;
    try {
      const prepared = await this.prepare();
      return this.settle(await this.send(prepared));
    } catch (err) {
      if (err instanceof AsksPerson) return this.asks(err.pattern);
      return await this.settleFailure(err);
    } finally {
      ctx.cancellationSignal.removeEventListener('abort', onCancel);
      unrelay?.();
      unregister();
      this.pulse?.stop();
      this.lease?.release();
    }
  }

  // ---- prepare: lease, listing, policy verdict, resume plan; nothing is sent ----

  private async prepare(): Promise<Prepared> {
    const { deps, input } = this;
    const { server, fn } = splitTool(input.tool);
    if (!deps.pool.serverConfig(server)) {
      const why = `this node has no server named "${server}"`;
      throw new AttemptEnd('failed', why, { type: FailureType.unknownTool, retryable: false });
    }
    this.watch.listed(true, false);
    let tools: Tool[];
    try {
      this.lease = await deps.pool.acquire(server, input.jobId);
      // A remote listing is read anew for every call, so a change is caught even without list_changed (A2).
      tools = await this.lease.connection.listTools(this.lease.connection.kind === 'remote');
    } catch (err) {
      const message = (err as Error).message;
      if (err instanceof OutcomeUnknown) {
        // B4: the server answered 429 to the session's own requests; its listing is unknown, so no retry.
        throw new AttemptEnd('failed', `outcome unknown: ${message}`, {
          type: FailureType.attemptFailed,
          retryable: false,
          message: `${input.tool}: ${message}`,
        });
      }
      throw this.nothingSent(
        `the server was not reachable: ${message}`,
        `server "${server}" was not reachable: ${message}`,
      );
    }
    const { connection } = this.lease;
    this.state.protocol = connection.protocol;
    // I6: a sandboxed server that is not isolated is said on every attempt it serves.
    if (connection.kind === 'sandbox' && !connection.isolated) this.notes.push(UNISOLATED);
    if (connection.kind === 'sandbox' && !this.state.sandboxQueues?.includes(deps.node.queue)) {
      // Said at once, in a heartbeat: a node cut off before its answer arrives still gets its sandbox stopped.
      this.state.sandboxQueues = [...(this.state.sandboxQueues ?? []), deps.node.queue];
      this.beat(true);
    }
    const tool = tools.find((t) => t.name === fn);
    if (!tool) {
      // Perhaps listed only to clients that offer what oz0 does not (sampling, elicitation, roots): say so.
      const needs = (await hiddenFunctions(deps.pool, server, tools).catch(() => undefined))?.get(fn);
      const why = `server "${server}" has no function "${fn}"${needs ? `: ${hiddenWhy(needs)}` : ''}`;
      throw new AttemptEnd('failed', why, { type: FailureType.unknownTool, retryable: false });
    }
    this.watch.listed(true, true);
    let allowed = await this.policyVerdict(server, tools, connection.kind === 'remote');
    if (allowed.allowed && allowed.confirm && input.confirmed?.key !== input.key) {
      allowed = await this.question(server, tools, connection.kind === 'remote');
    }
    if (!allowed.allowed) {
      throw new AttemptEnd('refused', allowed.why, {
        type: FailureType.refused,
        retryable: false,
        message: `${input.tool}: refused: ${allowed.why}`,
      });
    }
    const tasks = taskPlan({
      support: taskSupportOf(tool),
      offered: connection.offersLegacyTasks,
      extension: connection.offersTaskExtension,
      priorTask: this.state.task !== undefined,
    });
    if ('refused' in tasks) {
      const why = `nothing was sent: ${input.tool} ${tasks.refused}`;
      throw new AttemptEnd('failed', why, { type: FailureType.attemptFailed, retryable: false });
    }
    // Stopped while it prepared (settle reads the cause): nothing was sent.
    if (this.stopCause) throw new Error('stopped before the request was sent');
    this.again = mayBeMadeAgain(tool, connection.kind, allowed.approved);
    this.readOnly = tool.annotations?.readOnlyHint === true;
    // A task the attempt before made is polled, not made again: that is safe whatever the function's hints.
    if (this.state.task) this.notes.push(`resumed task ${this.state.task.id}`);
    else if (this.n > 1 && !this.again && !(this.state.unsent ?? []).includes(this.n - 1)) {
      throw new AttemptEnd(
        'lost',
        'not made again: the attempt before may have run, and this function may not be made twice',
        {
          type: FailureType.mayHaveRun,
          retryable: false,
          message: `${input.tool} (key ${input.key}) may have run: not made again`,
        },
      );
    }
    const plan =
      this.again && !this.state.task
        ? resumePlan({
            attempt: this.n,
            kind: connection.kind,
            declaresResume: declaresResume(tool),
            prior: this.state,
          })
        : {};
    if (plan.note) this.notes.push(plan.note);
    // A7: a live session's caller that heard the call wait for a person hears now that it goes on.
    if (input.relay) deps.relay.waiting(input.jobId, input.relay.callId, undefined);
    return {
      connection,
      fn,
      resume: plan.meta,
      takesTokens: connection.kind === 'remote' && declaresResume(tool),
      asTask: tasks.as === 'task' || tasks.as === 'may be task',
      tool,
    };
  }

  /**
   * A1-A3, B6, C5: the tenant's current policy, kill switches and approvals. A first attempt may be checked against
   * the node's live copy; a retry reads anew (B6), and so does a refusal.
   */
  private async policyVerdict(server: string, tools: Tool[], remote: boolean): Promise<Verdict> {
    const { deps, input } = this;
    const check = (policy: PolicyRead) =>
      verdict({
        ...policy,
        tool: input.tool,
        remote,
        listing: remote || policy.state.approvals[server] ? listingDigest(tools) : undefined,
      });
    try {
      const policy = await deps.gate.read(input.tenant, this.n > 1 ? 0 : deps.policyMaxAgeMs, this.n === 1);
      const first = check(policy);
      return !first.allowed && policy.watched ? check(await deps.gate.read(input.tenant, 0)) : first;
    } catch (err) {
      // Without the tenant's policy nothing is sent; the call may try again.
      const message = (err as Error).message;
      throw this.nothingSent(
        `could not read the tenant's policy: ${message}`,
        `could not read the policy of ${input.tenant}: ${message}`,
      );
    }
  }

  /**
   * A4: the live verdict says `confirm` and no person approved this call yet. Its tenant's policy workflows watch
   * the question from now on, and the verdict is made again with their states as of that moment: still `confirm`,
   * the call waits (nothing is sent); changed meanwhile, the new verdict holds.
   */
  private async question(server: string, tools: Tool[], remote: boolean): Promise<Verdict> {
    const { deps, input } = this;
    const until = Date.now() + (input.confirmTimeoutSeconds ?? 0) * 1000;
    const question = { jobId: input.jobId, key: input.key, tool: input.tool, until };
    let policy: PolicyRead;
    try {
      policy = await deps.gate.watchQuestion(input.tenant, question);
    } catch (err) {
      const message = (err as Error).message;
      throw this.nothingSent(
        `could not ask the tenant's policy to watch the question: ${message}`,
        `could not reach the policy of ${input.tenant}: ${message}`,
      );
    }
    const now = verdict({
      ...policy,
      tool: input.tool,
      remote,
      listing: remote || policy.state.approvals[server] ? listingDigest(tools) : undefined,
    });
    if (now.allowed && now.confirm && input.confirmed?.key !== input.key) throw new AsksPerson(now.confirm);
    await deps.gate.forgetQuestion(input.tenant, question);
    return now;
  }

  /** A4: what the job needs to ask a person: the pattern, and the arguments as a person may read them. */
  private asks(pattern: string): CallAsks {
    const { input, deps } = this;
    const args = JSON.stringify(redactSecrets(input.args));
    const shown = args.length > QUESTION_ARGS_CHARS ? `${args.slice(0, QUESTION_ARGS_CHARS - 1)}…` : args;
    if (input.relay) {
      const call = this.ctx.info.activityId;
      deps.relay.waiting(
        input.jobId,
        input.relay.callId,
        `waiting for a person's yes (${pattern}: confirm): oz0 call approve ${input.jobId} ${call}`,
      );
    }
    return {
      asks: { pattern, args: shown },
      node: deps.node.id,
      ...(this.state.sandboxQueues ? { sandboxQueues: this.state.sandboxQueues } : {}),
    };
  }

  /** An end before anything was sent: any call may try again, and the next attempt knows it may (`unsent`). */
  private nothingSent(note: string, message: string): AttemptEnd {
    this.state.unsent = [...(this.state.unsent ?? []), this.n];
    return new AttemptEnd('failed', note, { type: FailureType.attemptFailed, retryable: true, message });
  }

  // ---- send: the request, its stop, its progress ----

  private async send(p: Prepared): Promise<CallToolResult> {
    const { input } = this;
    const remaining = attemptLimitMs(input.timeoutSeconds) - (Date.now() - this.startedAt);
    const limit = setTimeout(
      () => this.stop({ outcome: 'timeout', text: `oz0: time limit: ${input.timeoutSeconds} s less its margin` }),
      Math.max(0, remaining),
    );
    // P1: a call that may be made again asks for progress, under a token of its own; so does one whose live session's
    // caller asked for it (H6), and one that runs as a task, which a later attempt follows too.
    const progressToken = this.again || input.relay?.progress || p.asTask ? `oz0:${input.key}:${this.n}` : undefined;
    const unwatch = progressToken ? p.connection.watchProgress(progressToken, (n) => this.onProgress(n, p)) : undefined;
    // O2-O3: the MCP client span; its traceparent goes in _meta, so the server's spans are its children.
    const mcp = this.watch.toolsCall(p.fn, p.connection);
    const request = {
      name: p.fn,
      arguments: input.args,
      _meta: {
        ...mcp.meta,
        [IDEMPOTENCY_KEY_META]: input.key,
        ...(progressToken ? { progressToken } : {}),
        ...(p.resume ? { [RESUME_META]: p.resume } : {}),
      },
    };
    // The request never outlives the attempt's own limit; never the SDK's 60 s default.
    const timeoutMs = Math.max(1, remaining) + 5000;
    const signal = this.controller.signal;
    this.sent = true;
    try {
      const result = await mcp.within(() =>
        makeCall({
          connection: p.connection,
          tool: p.tool,
          params: request,
          asTask: p.asTask,
          priorTask: this.state.task,
          ttlMs: input.timeoutSeconds * input.maxAttempts * 1000,
          signal,
          timeoutMs,
          onTask: (task) => this.onTask(task, p.connection.protocol),
        }),
      );
      mcp.end(result);
      return result;
    } catch (err) {
      mcp.end(undefined, err, this.stopCause?.outcome);
      if (err instanceof AskedForInput) return await this.asked(err, p);
      throw err;
    } finally {
      unwatch?.();
      clearTimeout(limit);
    }
  }

  /** The first stop names the cause; the MCP request is cancelled with its words as the reason (C2). */
  private stop(why: StopCause): void {
    this.watch.stopping();
    this.stopCause ??= why;
    this.controller.abort(this.stopCause.text);
  }

  /** P1, P3: a progress notification for this attempt's request; progress must increase within one request. */
  private onProgress(n: { progress: number; total?: number; _meta?: Record<string, unknown> }, p: Prepared): void {
    if (!Number.isFinite(n.progress) || (this.progress && n.progress <= this.progress.progress)) return;
    this.progress = typeof n.total === 'number' ? { progress: n.progress, total: n.total } : { progress: n.progress };
    this.state.progress = this.progress.progress;
    this.state.total = this.progress.total;
    const token = p.takesTokens ? resumeTokenOf(n._meta) : undefined;
    if (token && 'token' in token) {
      this.state.token = token.token;
      this.state.tokenProgress = this.progress;
    } else if (token) {
      this.state.invalidToken = true;
      if (!this.notes.includes(IGNORED_TOKEN)) this.notes.push(IGNORED_TOKEN);
    }
    if (this.input.relay) this.deps.relay.report(this.input.jobId, this.input.relay.callId, this.progress);
    this.beat();
  }

  /** The call's task, made or found, and each status after: in the heartbeat at once, for the next attempt. */
  private onTask(task: TaskSeen, protocol: string): void {
    if (!this.state.task) this.notes.push(`task ${task.taskId}`);
    this.state.task = { id: task.taskId, status: task.status, protocol: this.state.task?.protocol ?? protocol };
    this.beat(true);
  }

  /**
   * Issue 25.5: the server asked for an elicitation or a sampling (or refused the call without one). Nobody will
   * answer: the call ends with an error result that names it, and a task left waiting for the answer is cancelled.
   */
  private async asked(err: AskedForInput, p: Prepared): Promise<CallToolResult> {
    this.notes.push(err.note());
    const task = this.state.task;
    if (task && task.status !== 'completed' && task.status !== 'failed' && task.status !== 'cancelled') {
      this.notes.push(await cancelTask(p.connection, task));
    }
    return err.result();
  }

  /** Something the heartbeat carries changed: it goes out within the pace's carry period, or now. */
  private beat(now = false): void {
    this.pulse?.beat(now);
  }

  // ---- settle: the outcome, its record, what Temporal is told ----

  /** An answer came: an oversize one costs the attempt, a busy one is B2/B3, any other goes to the job. */
  private settle(result: CallToolResult): CallOutput {
    const size = Buffer.byteLength(JSON.stringify(result));
    if (size > MAX_RESULT_BYTES) {
      // The same call would answer the same again: oversize is not transient, so there is no next attempt.
      throw new AttemptEnd('failed', `the answer was ${(size / 1024 / 1024).toFixed(1)} MB, over oz0's limit of 1 MB`, {
        type: FailureType.attemptFailed,
        retryable: false,
        message: `${this.input.tool} answered ${size} bytes, over the 1 MB limit`,
      });
    }
    const busy = busyOf(result);
    if (busy) return this.settleBusy(result, busy.retryAfter);
    this.record(result.isError ? 'error' : 'ok');
    return this.output(result);
  }

  /** B2/B3: a busy server: try again after its wait, or hand its error to the job with the wait in words. */
  private settleBusy(result: CallToolResult, retryAfter: number | undefined): CallOutput {
    const busy = busyVerdict({ again: this.again, lastAttempt: this.last, retryAfter });
    this.record('busy', busy.note);
    if (busy.retry) {
      this.watch.busyWait(busy.delayMs);
      this.handOn();
      // One retry layer (B5): Temporal waits, not oz0; maximumInterval is 60 s so this delay is never cut short.
      throw ApplicationFailure.create({
        type: FailureType.busy,
        message: `${this.input.tool}: the server is busy; ${busy.note.replace(/^busy: /, '')}`,
        nextRetryDelay: busy.delayMs,
        details: [this.state],
      });
    }
    return this.output({ ...result, content: [...(result.content ?? []), { type: 'text', text: busy.words }] });
  }

  /** No answer for the job: prepare ended the attempt, a stop cut the request, or the request failed. */
  private async settleFailure(err: unknown): Promise<never> {
    if (err instanceof ApplicationFailure) throw err;
    if (err instanceof AttemptEnd) return this.fail(err.outcome, err.note, err.failure);
    if (this.stopCause) return this.stopped(this.stopCause);
    if (err instanceof TaskGone) return this.taskGone(err);
    // I4: the server's sandbox went past a limit and was stopped: said by name, not as a closed connection.
    const limit = this.lease?.connection.stoppedFor();
    const message = limit ? `its sandbox was stopped: past ${limit}` : ((err as Error).message ?? String(err));
    this.deps.logger.warn({ tool: this.input.tool, key: this.input.key, err: message }, 'attempt failed');
    return this.fail('failed', `outcome unknown: ${message}`, {
      type: FailureType.attemptFailed,
      // A task made is polled by the next attempt, never made again.
      retryable: this.again || this.state.task !== undefined,
      message: `${this.input.tool}: ${message}`,
    });
  }

  /**
   * The task the attempt before made is gone from its server (a restart, another session's, its ttl): a read starts
   * over with a task of its own; anything else is not made again, whatever its hints.
   */
  private taskGone(err: TaskGone): never {
    const { input } = this;
    this.state.task = undefined;
    if (this.readOnly) {
      return this.fail('lost', `${err.message}: started over`, { type: FailureType.attemptFailed, retryable: true });
    }
    return this.fail('lost', `${err.message}: not made again`, {
      type: FailureType.mayHaveRun,
      retryable: false,
      message: `${input.tool} (key ${input.key}) may have run as a task its server no longer knows: not made again`,
    });
  }

  /** An attempt that a stop ended: cancelled, killed, past its time limit, or its node going down. */
  private async stopped(why: StopCause): Promise<never> {
    const { deps, input } = this;
    const { connection } = this.lease ?? {};
    // A call that may be made again, one stopped before it was sent, and one whose task the next attempt can poll
    // may have a next attempt (on another node).
    const retryable = !this.sent || this.again || this.state.task !== undefined;
    // A task nobody will poll again is cancelled on its server (a time limit with attempts left leaves it running).
    const ends = why.bySession || why.outcome === 'cancelled' || why.outcome === 'killed' || this.last || !retryable;
    if (this.state.task && ends && connection) this.notes.push(await cancelTask(connection, this.state.task));
    // C3: a stopped call on a sandboxed server stops that server's whole process tree too (C7: before the next).
    if (this.sent && connection?.kind === 'sandbox') await deps.pool.stopSandbox(connection.server, input.jobId);
    if (!this.sent) this.state.unsent = [...(this.state.unsent ?? []), this.n];
    if (why.bySession) {
      return this.fail(why.outcome, why.text, {
        type: FailureType.callCancelled,
        retryable: false,
        message: `${input.tool}: ${why.text}`,
      });
    }
    if (why.outcome === 'cancelled') {
      this.record(why.outcome, why.text);
      throw new CancelledFailure(why.text, [this.state]);
    }
    const type = {
      lost: FailureType.nodeShutdown,
      killed: FailureType.killed,
      timeout: FailureType.timeLimit,
    }[why.outcome as 'lost' | 'killed' | 'timeout'];
    return this.fail(why.outcome, why.text, {
      type: type ?? FailureType.attemptFailed,
      retryable: why.outcome === 'killed' ? false : retryable,
      message: `${input.tool}: ${why.text}`,
    });
  }

  /** Records the attempt, hands it on when there may be a next attempt, and tells Temporal how it ended. */
  private fail(outcome: Outcome, note: string, failure: { type: string; retryable: boolean; message?: string }): never {
    this.record(outcome, note);
    if (failure.retryable) this.handOn();
    throw ApplicationFailure.create({
      type: failure.type,
      message: failure.message ?? note,
      nonRetryable: !failure.retryable,
      details: [this.state],
    });
  }

  /** This attempt's line in the trace, with its start notes (P5) and the last progress it saw. */
  private record(outcome: Outcome, why?: string): void {
    const note = [...this.notes, why].filter(Boolean).join('; ');
    this.state.attempts = [
      ...this.state.attempts,
      { attempt: this.n, outcome, ...(note ? { note } : {}), ...(this.progress ? { progress: this.progress } : {}) },
    ];
  }

  /**
   * The next attempt reads what this one left from the last heartbeat (P2): the record goes out in one, now (the
   * failure that ends the attempt carries it too, as its details).
   */
  private handOn(): void {
    this.pulse?.stop();
    this.ctx.heartbeat(this.state);
  }

  /** The job's view of an answer: content, structured content, isError, _meta; and the trace of its attempts. */
  private output(result: CallToolResult): CallOutput {
    const meta = withoutReservedMeta(result._meta);
    return {
      result: {
        isError: result.isError === true,
        content: result.content ?? [],
        ...(result.structuredContent ? { structuredContent: result.structuredContent as Record<string, unknown> } : {}),
        ...(meta ? { _meta: meta } : {}),
      },
      attempts: this.state.attempts,
      node: this.deps.node.id,
      ...(this.state.protocol ? { protocol: this.state.protocol } : {}),
      ...(this.state.sandboxQueues ? { sandboxQueues: this.state.sandboxQueues } : {}),
    };
  }
}
