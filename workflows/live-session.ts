/**
 * Live sessions (SPEC H1-H10): the calls are decided at run time, by a harness the config names (started on a node)
 * or by a Temporal client outside the job. Each call is a workflow Update: the workflow accepts it, decides its key
 * (K3 for a function that says idempotentHint, else K2; k counted in the order calls were accepted, afresh in each
 * session run), runs it on the session's node and answers its result. A lost node starts a fresh session run on
 * another node when every call the lost run made may be made again (H8, T4); otherwise the job stops, naming the call.
 */
import {
  ActivityCancellationType,
  ApplicationFailure,
  CancellationScope,
  ActivityFailure,
  TimeoutFailure,
  condition,
  isCancellation,
  proxyActivities,
  setHandler,
  upsertSearchAttributes,
} from '@temporalio/workflow';
import { TimeoutType } from '@temporalio/common';
import type { Activities } from '../model/activities';
import type { ExternalSession, HarnessSession } from '../model/schemas';
import { errorResult, forgetLostNode, makeCall, placeCall } from './calls';
import type { JobContext } from './calls';
import { changed } from './marks';
import { matchesAny, sessionInputProblem, splitTool } from '../model/checks';
import { FailureType } from '../model/activities';
import { Oz0Tools } from '../model/job';
import {
  callToolUpdate,
  cancelCallUpdate,
  closeSessionUpdate,
  externalSessionQuery,
  openSessionUpdate,
  sessionCallQuery,
} from '../model/messages';
import type {
  CancelCallInput,
  CloseSessionInput,
  ExternalSessionState,
  OpenSessionInput,
  SessionCallInput,
  SessionCallOutput,
  SessionOpened,
} from '../model/messages';
import type { HarnessOutcome, SessionPlan } from '../model/activities';
import type { SessionTrace, StepTrace, ToolResult, TraceStep } from '../model/job';
import { SessionKeys, defaultKey } from '../model/keys';
import {
  MAX_SESSION_RUNS,
  SESSIONS_HANDED_ON,
  describeOn,
  handedOn,
  mayHaveRun,
  sessionLease,
  sessionQueueOf,
  shutDownWords,
} from './session';
import { liveCallPriority } from '../model/shares';

/** Calls a session step keeps in the trace; older ones are counted in `omitted`. */
const MAX_SESSION_TRACE_CALLS = 1000;
/** A harness's backstop beyond its own time limit: the node stops it itself at `timeoutSeconds` (H7). */
const HARNESS_SLACK_SECONDS = 60;
/** A session's node that does not pick up its harness this long is taken as lost. */
const HARNESS_PICKUP = '60s';

/** A call of a live session while it runs: its scope (a cancel stops it), and who cancelled it, if anyone did. */
interface RunningCall {
  scope: CancellationScope;
  cancelledBy?: string;
  /** Its step while it runs: its activity id, and its key once decided. */
  step: StepTrace;
}

/** One run of one live session: on one node, its keys counted afresh (K3, H8). */
class LiveRun {
  readonly calls = new Map<string, RunningCall>();
  /** Every call this run made, for T4: a fresh run only if each may be made again. */
  readonly made: { tool: string; key: string }[] = [];
  /** How many calls this run accepted (H10). */
  accepted = 0;
  lost?: string;
  /** Issue 56.4: the calls this run finished, by tool and K3 content key, for a run its node hands on. */
  readonly finished = new Map<string, SessionCallOutput>();
  /** Issue 56.4: what the run before it finished, when its node handed it on: those calls are answered from here. */
  earlier?: ReadonlyMap<string, SessionCallOutput>;
  closed?: ToolResult;
  private readonly keys: SessionKeys;
  private readonly plans = new Map<string, Promise<SessionPlan>>();
  private readonly known = new Map<string, SessionPlan>();

  constructor(
    readonly ctx: JobContext,
    readonly n: number,
    readonly run: number,
    readonly node: { id: string; queue: string; sessionQueue?: string },
    readonly trace: SessionTrace,
    /** A harness's tool patterns (H1); undefined for an external session (the tenant's policy alone decides). */
    readonly patterns: readonly string[] | undefined,
  ) {
    this.keys = new SessionKeys(ctx.jobId, ctx.run, n);
  }

  get session(): string {
    return this.trace.session;
  }

  /** The node's word on a tool (hints, settings), asked once per run, on the session's node (its sandboxes live there). */
  describe(tool: string): Promise<SessionPlan> {
    let plan = this.plans.get(tool);
    if (!plan) {
      plan = describeOn(this.ctx, this.node.queue)(this.ctx.jobId, this.ctx.tenant, [tool]);
      this.plans.set(tool, plan);
      plan.then(
        (p) => this.known.set(tool, p),
        () => this.plans.delete(tool),
      );
    }
    return plan;
  }

  mayRetry(tool: string): boolean {
    return this.known.get(tool)?.mayRetry[tool] === true;
  }

  /** The K3 key this call would get, counted now, in the order calls are accepted (K4). */
  contentKey(tool: string, args: Record<string, unknown> | undefined): string {
    return this.keys.next(splitTool(tool).fn, args);
  }

  /** Puts a call's step in the session's trace (a pending one first, then its end in its place). */
  place(step: StepTrace): (end: StepTrace) => void {
    const calls = this.trace.calls;
    calls.push(step);
    if (calls.length > MAX_SESSION_TRACE_CALLS) {
      calls.shift();
      this.trace.omitted++;
    }
    return (end) => {
      const i = calls.indexOf(step);
      if (i >= 0) calls[i] = end;
    };
  }

  /** Stops every running call (with the caller's words), and waits until each has ended. */
  async stopCalls(why: string): Promise<void> {
    await CancellationScope.nonCancellable(async () => {
      await Promise.all([...this.calls.keys()].map((callId) => stopCall(this, callId, why)));
      await condition(() => this.calls.size === 0);
    });
  }
}

/** Stops one running call: the attempt on its node first (so its server hears the caller's words), then its scope. */
async function stopCall(live: LiveRun, callId: string, why: string): Promise<boolean> {
  const call = live.calls.get(callId);
  if (!call) return false;
  call.cancelledBy ??= why;
  const { stopCall: stop } = proxyActivities<Activities>({
    taskQueue: live.node.queue,
    priority: live.ctx.priority,
    scheduleToCloseTimeout: '10s',
    retry: { maximumAttempts: 1 },
  });
  await stop(live.ctx.jobId, callId, call.cancelledBy).catch(() => undefined);
  // The backstop: an attempt that was not running (waiting for its retry) or a node that did not answer.
  call.scope.cancel();
  return true;
}

/** An external session waiting for its client: to be opened (again, after a lost node), then closed. */
interface Waiting {
  n: number;
  run: number;
  /** I14: the digest of its agent's token, when its starter made one. */
  digest?: string;
  trace: SessionTrace;
  opening: boolean;
  opened?: LiveRun;
  /** Issue 56.4: what the run before it finished, when its node handed the session on. */
  earlier?: LiveRun['earlier'];
}

/**
 * The live sessions of a job. Its Update handlers are registered when the job starts, before its first await, and
 * answer only while a live session is open; at any other time they refuse (the Update is rejected, never recorded).
 */
export class LiveSessions {
  private ctx?: JobContext;
  private current?: LiveRun;
  private waiting?: Waiting;
  /** Live calls this run of the job accepted: a run holds at most one live session's Updates (Temporal caps them). */
  callsThisRun = 0;
  /** I14: the token digests of the external sessions not begun yet, in order. */
  private ahead: string[] = [];

  register(): void {
    setHandler(callToolUpdate, (input) => this.call(input), {
      validator: (input) => this.check(input, true),
      description: 'H4: one call of the open live session; answers its result (a CallToolResult)',
    });
    setHandler(cancelCallUpdate, (input) => this.cancel(input), {
      validator: (input) => this.check(input, false),
      description: 'H5: stops one running call of the open live session',
    });
    setHandler(openSessionUpdate, (input) => this.open(input), {
      validator: (input) => this.checkOpen(input),
      description: "H9: opens the job's waiting external session; answers its name, run and node",
    });
    setHandler(
      sessionCallQuery,
      (callId) => {
        const step = this.current?.calls.get(callId)?.step;
        return step?.key ? { activityId: step.activityId, key: step.key } : null;
      },
      { description: "H9: a live session's running call, by its call id: its activity id and key" },
    );
    setHandler(externalSessionQuery, () => this.externalState(), {
      description: 'I14: the external session a gateway may open for a token (token digests, never a token)',
    });
    setHandler(closeSessionUpdate, (input) => this.close(input), {
      validator: (input) => this.checkClose(input),
      description: 'H9: ends the open external session with its result',
    });
  }

  attach(ctx: JobContext, steps: readonly object[]): void {
    this.ctx = ctx;
    this.ahead = steps.flatMap((step) => {
      const s = (step as { session?: { external?: true; tokenDigest?: string } }).session;
      return s?.external && s.tokenDigest ? [s.tokenDigest] : [];
    });
  }

  private externalState(): ExternalSessionState {
    const w = this.waiting;
    const live = this.current;
    const current =
      w && live && live.trace.kind === 'external' && w.opened === live
        ? { session: live.session, run: live.run, open: true, ...(w.digest && { digest: w.digest }) }
        : w
          ? { session: `s${w.n}`, run: w.run, open: false, ...(w.digest && { digest: w.digest }) }
          : undefined;
    return { tenant: this.ctx?.tenant ?? '', ...(current && { current }), ahead: [...this.ahead] };
  }

  // ---- the Updates ----

  private check(input: SessionCallInput | CancelCallInput, isCall: boolean): void {
    const problem = sessionInputProblem(input, isCall);
    if (problem) throw new Error(problem);
    const live = this.current;
    if (!live || live.session !== input.session) throw new Error(`session ${input.session} is not open`);
    if (live.run !== input.run) {
      throw new Error(
        `session ${input.session} run ${input.run} has ended${live.run > input.run ? `; it runs again as run ${live.run}: make its calls again from the start` : ''}`,
      );
    }
    if (live.lost) throw new Error(`session ${input.session} run ${input.run} was lost with its node: ${live.lost}`);
    if (isCall && live.calls.has(input.callId)) throw new Error(`call ${input.callId} is already running`);
  }

  private async call(input: SessionCallInput): Promise<SessionCallOutput> {
    const ctx = this.ctx!;
    const live = this.current!;
    const tool = input.tool;
    live.accepted++;
    this.callsThisRun++;
    if (live.accepted > ctx.settings.maxCallsPerSession) {
      const text = `oz0: refused: this session made ${ctx.settings.maxCallsPerSession} calls, its limit (jobs.maxCallsPerSession)`;
      return { result: errorResult(text) };
    }
    if (live.patterns && !matchesAny(live.patterns, tool)) {
      const text = `oz0: refused: ${tool} is not one of this harness's tools (${live.patterns.join(', ')})`;
      return { result: errorResult(text) };
    }
    // Counted and placed now, in the order the workflow accepted the calls (H4, K4); the key is known once the node
    // has said whether the function is idempotent.
    const contentKey = live.contentKey(tool, input.args);
    // Issue 56.4: the same call, counted the same way, ended in the run its node handed on: it is not made again.
    const earlier = live.earlier?.get(`${tool} ${contentKey}`);
    if (earlier) {
      live.finished.set(`${tool} ${contentKey}`, earlier);
      return earlier;
    }
    const placed = placeCall(ctx);
    const pending: StepTrace = {
      n: placed.n,
      tool,
      key: '',
      session: live.session,
      activityId: placed.activityId,
      sessionRun: live.run,
      result: { isError: false, content: [] },
      attempts: [],
      running: true,
    };
    const settle = live.place(pending);
    const running: RunningCall = { scope: new CancellationScope(), step: pending };
    live.calls.set(input.callId, running);
    let key = '';
    try {
      return await running.scope.run(async () => {
        const plan = await live.describe(tool);
        if (!ctx.settings.tools[tool] && plan.settings[tool]) noteTool(ctx, tool, plan);
        key = plan.idempotent[tool] ? contentKey : defaultKey(ctx.jobId, ctx.run, placed.activityId);
        pending.key = key;
        const made = { tool, key };
        live.made.push(made);
        const end = await makeCall(ctx, placed, { call: tool, args: input.args }, key, {
          session: live.session,
          sessionRun: live.run,
          taskQueue: live.node.queue,
          lost: () => live.lost,
          cancelledBy: () => running.cancelledBy,
          relay: { callId: input.callId, progress: input.progress === true },
          settings: plan.settings[tool],
          // F4: an agent waits on each of its calls: they go one step ahead of a scripted call of the same job.
          priorityKey: liveCallPriority(ctx.priority.priorityKey),
          record: settle,
        });
        // A call that ended while it waited for a person sent nothing: it counts as not made (H8).
        if (end.unsent) live.made.splice(live.made.indexOf(made), 1);
        const output = { result: { ...end.step.result, ...(end.meta ? { _meta: end.meta } : {}) }, key, n: placed.n };
        if (!end.lost && !running.cancelledBy) live.finished.set(`${tool} ${contentKey}`, output);
        return output;
      });
    } catch (err) {
      // Stopped before its activity ran (or the node could not describe it): the step says why.
      const why = running.cancelledBy
        ? `cancelled by its session: ${running.cancelledBy}`
        : isCancellation(err)
          ? 'the job was cancelled'
          : `its node could not describe it: ${causeMessage(err)}`;
      const result = errorResult(`oz0: the call was stopped: ${why}`);
      if (pending.running) settle({ ...pending, key, result, attempts: [], running: undefined });
      return { result, ...(key ? { key } : {}), n: placed.n };
    } finally {
      live.calls.delete(input.callId);
    }
  }

  private async cancel(input: CancelCallInput): Promise<boolean> {
    return stopCall(this.current!, input.callId, input.reason ?? 'cancelled by its caller');
  }

  private checkOpen(input: OpenSessionInput | undefined): void {
    if (input?.client !== undefined && (typeof input.client !== 'string' || input.client.length > 200)) {
      throw new Error('client is a string of at most 200 characters');
    }
    const w = this.waiting;
    if (!w) throw new Error('this job has no external session waiting to be opened');
    if (w.opening || w.opened) throw new Error(`session s${w.n} is being opened already`);
  }

  private async open(input: OpenSessionInput | undefined): Promise<SessionOpened> {
    const ctx = this.ctx!;
    const w = this.waiting!;
    w.opening = true;
    try {
      // N5: every node asked may be full: the client hears why (the node's words), not that an activity failed.
      const plan = await describeOn(ctx)(ctx.jobId, ctx.tenant, [], true).catch((err: unknown) => {
        const why = activityWords(err);
        throw ApplicationFailure.nonRetryable(`session s${w.n} could not open: ${why}`);
      });
      ctx.sandboxQueues.add(plan.node.queue);
      const live = new LiveRun(ctx, w.n, w.run, plan.node, w.trace, undefined);
      live.earlier = w.earlier;
      w.trace.runs.push({ run: w.run, node: plan.node.id, ...(input?.client ? { client: input.client } : {}) });
      ctx.show();
      this.current = live;
      w.opened = live;
      return { session: live.session, run: live.run, node: plan.node.id };
    } finally {
      w.opening = false;
    }
  }

  private checkClose(input: CloseSessionInput): void {
    const problem = sessionInputProblem(input, false);
    if (problem) throw new Error(problem);
    const live = this.current;
    if (!live || live.session !== input.session || live.run !== input.run || live.trace.kind !== 'external') {
      throw new Error(`session ${input.session} run ${input.run} is not an open external session`);
    }
  }

  private async close(input: CloseSessionInput): Promise<void> {
    const live = this.current!;
    await live.stopCalls('the session was closed');
    live.closed = resultOf(input.result, input.isError === true);
  }

  // ---- the sessions ----

  /** H1-H8: runs a harness on a node until it exits; a fresh run on another node when its node is lost. */
  async runHarness(step: HarnessSession, n: number, record: (step: TraceStep) => void): Promise<void> {
    const ctx = this.ctx!;
    const trace = sessionTrace(`s${n}`, 'harness', step.harness);
    record(trace);
    let earlier: LiveRun['earlier'];
    /** Runs lost (not handed on): MAX_SESSION_RUNS bounds them; a deploy's hand-overs are not counted. */
    let lostRuns = 0;
    for (let run = 1; ; run++) {
      const plan = await describeOn(ctx)(ctx.jobId, ctx.tenant, [], true);
      ctx.sandboxQueues.add(plan.node.queue);
      const live = new LiveRun(ctx, n, run, plan.node, trace, ctx.settings.harnesses[step.harness]?.tools);
      live.earlier = earlier;
      trace.runs.push({ run, node: plan.node.id });
      ctx.show();
      this.current = live;
      try {
        const outcome = await this.harnessRun(live, step);
        if ('result' in outcome) {
          await live.stopCalls('the harness exited');
          return end(trace, outcome.result, outcome.ended);
        }
        if (!outcome.handed) lostRuns++;
        earlier = this.afterLost(live, outcome.lost, lostRuns, outcome.handed);
      } finally {
        this.current = undefined;
      }
    }
  }

  private async harnessRun(
    live: LiveRun,
    step: HarnessSession,
  ): Promise<HarnessOutcome | { lost: string; handed: boolean }> {
    const ctx = live.ctx;
    const limit = ctx.settings.harnesses[step.harness]?.timeoutSeconds ?? 600;
    const { runHarness } = proxyActivities<Activities>({
      taskQueue: sessionQueueOf(live.node),
      priority: ctx.priority,
      summary: `harness ${step.harness} · ${live.session} run ${live.run}`,
      scheduleToStartTimeout: HARNESS_PICKUP,
      startToCloseTimeout: `${limit + HARNESS_SLACK_SECONDS}s`,
      // The harness's activity is the session's lease: its heartbeat stopping means the node is lost (T4).
      heartbeatTimeout: `${ctx.settings.heartbeatTimeoutSeconds}s`,
      retry: { maximumAttempts: 1 },
      cancellationType: ActivityCancellationType.WAIT_CANCELLATION_COMPLETED,
    });
    // H5: a job cancel stops the harness's running calls first, then the harness. Its scope is shielded from the
    // job's (a non-cancellable scope is never cancelled, even by itself) and cancelled by hand after the calls.
    let scope!: CancellationScope;
    const done = CancellationScope.nonCancellable(() => {
      scope = new CancellationScope();
      return scope.run(() =>
        runHarness({
          jobId: ctx.jobId,
          tenant: ctx.tenant,
          harness: step.harness,
          session: live.session,
          sessionRun: live.run,
          input: step.input ?? null,
        }),
      );
    });
    CancellationScope.current().cancelRequested.catch(async () => {
      await live.stopCalls('the job was cancelled');
      scope.cancel();
    });
    try {
      return await done;
    } catch (err) {
      if (isCancellation(err)) throw err;
      const handed = handedOn(err) && changed(ctx.settings, SESSIONS_HANDED_ON);
      const lost = handed ? shutDownWords(live.node.id) : nodeLost(err, live.node.id);
      if (lost) {
        live.lost = lost;
        for (const call of live.calls.values()) call.scope.cancel();
        return { lost, handed };
      }
      const message = activityWords(err);
      return { result: errorResult(`oz0: the harness failed: ${message}`), ended: `failed: ${message}` };
    }
  }

  /** H9: waits for a client to open the session, then for it to close it; a lost node waits for it to open again. */
  async runExternal(step: ExternalSession, n: number, record: (step: TraceStep) => void): Promise<void> {
    const ctx = this.ctx!;
    const trace = sessionTrace(`s${n}`, 'external');
    trace.status = 'waiting';
    record(trace);
    const deadline = step.timeoutSeconds === undefined ? undefined : Date.now() + step.timeoutSeconds * 1000;
    const left = () => (deadline === undefined ? undefined : Math.max(0, deadline - Date.now()));
    const at = step.tokenDigest ? this.ahead.indexOf(step.tokenDigest) : -1;
    if (at >= 0) this.ahead.splice(at, 1);
    let earlier: LiveRun['earlier'];
    let lostRuns = 0;
    for (let run = 1; ; run++) {
      /** This run's lease ended as its node's hand-over (issue 56.4), not as a lost node. */
      let handed = false;
      const w: Waiting = {
        n,
        run,
        trace,
        opening: false,
        earlier,
        ...(step.tokenDigest && { digest: step.tokenDigest }),
      };
      this.waiting = w;
      const opened = await waitFor(() => w.opened !== undefined, left());
      if (!opened) {
        this.waiting = undefined;
        return end(trace, errorResult(`oz0: no client opened session ${trace.session} in time`), 'timed out');
      }
      const live = w.opened!;
      trace.status = 'running';
      ctx.show();
      const lease = new CancellationScope();
      const leased = lease
        .run(() => sessionLease(ctx, sessionQueueOf(live.node))())
        .catch((err) => {
          if (isCancellation(err)) return;
          handed = handedOn(err) && changed(ctx.settings, SESSIONS_HANDED_ON);
          live.lost = handed ? shutDownWords(live.node.id) : `node ${live.node.id} was lost (its heartbeat stopped)`;
        });
      try {
        const settled = await waitFor(() => live.closed !== undefined || live.lost !== undefined, left());
        if (live.closed) return end(trace, live.closed, 'closed by its client');
        if (!settled) {
          await live.stopCalls('the session timed out');
          return end(
            trace,
            errorResult(`oz0: session ${trace.session} ran past its ${step.timeoutSeconds} s`),
            'timed out',
          );
        }
        for (const call of live.calls.values()) call.scope.cancel();
        if (!handed) lostRuns++;
        earlier = this.afterLost(live, live.lost!, lostRuns, handed);
        trace.status = 'waiting';
      } finally {
        lease.cancel();
        await leased;
        this.current = undefined;
        this.waiting = undefined;
      }
    }
  }

  /**
   * T4/H8: after a lost run, the job stops unless every call it made may be made again, and the next run starts.
   * Issue 56.4: a run its node handed on at shutdown had no call running; the next one answers the calls it finished.
   */
  private afterLost(live: LiveRun, why: string, lostRuns: number, handed: boolean): LiveRun['earlier'] {
    live.trace.runs[live.trace.runs.length - 1].ended = `${handed ? 'handed on' : 'lost'}: ${why}`;
    forgetLostNode(live.ctx, live.node.queue);
    // A call still waiting for a person's yes has sent nothing: it is withdrawn, not lost.
    // A handed-on run's finished calls are answered from the record, never made again; one that had not finished when
    // its node handed it on (cancelled as it was placed) may still have been sent, as on a lost node.
    const done = new Set(handed ? [...live.finished.values()].map((o) => o.key) : []);
    const risky = live.made.find((c) => !live.mayRetry(c.tool) && !live.ctx.questions.waits(c.key) && !done.has(c.key));
    if (risky) throw mayHaveRun(live.session, why, risky);
    if (lostRuns >= MAX_SESSION_RUNS) {
      throw ApplicationFailure.nonRetryable(
        `session ${live.session}: ${why}, ${lostRuns} times; giving up`,
        FailureType.mayHaveRun,
      );
    }
    return handed ? live.finished : undefined;
  }
}

function sessionTrace(session: string, kind: SessionTrace['kind'], harness?: string): SessionTrace {
  return { session, kind, ...(harness ? { harness } : {}), status: 'running', runs: [], calls: [], omitted: 0 };
}

function end(trace: SessionTrace, result: ToolResult, ended: string): void {
  trace.result = result;
  trace.status = 'ended';
  const last = trace.runs.at(-1);
  if (last) last.ended = ended;
}

/** A session's result from what its client gave: a string is text, anything else is structured content. */
function resultOf(value: unknown, isError: boolean): ToolResult {
  if (value === undefined || value === null) return { isError, content: [] };
  if (typeof value === 'string') return { isError, content: [{ type: 'text', text: value }] };
  const text = JSON.stringify(value);
  return {
    isError,
    content: [{ type: 'text', text }],
    ...(typeof value === 'object' && !Array.isArray(value)
      ? { structuredContent: value as Record<string, unknown> }
      : {}),
  };
}

/** Waits for `ready`, at most `ms` (none: as long as it takes); false when the time ran out. */
async function waitFor(ready: () => boolean, ms: number | undefined): Promise<boolean> {
  if (ms === undefined) {
    await condition(ready);
    return true;
  }
  return condition(ready, ms);
}

/** The node of a session's activity is lost: its heartbeat stopped, or nobody picked the activity up. */
/** What an activity's failure says (its cause's words), not that an activity failed. */
function activityWords(err: unknown): string {
  return err instanceof ActivityFailure && err.cause ? err.cause.message : String(err);
}

function nodeLost(err: unknown, node: string): string | undefined {
  if (!(err instanceof ActivityFailure) || !(err.cause instanceof TimeoutFailure)) return undefined;
  const why = {
    [TimeoutType.SCHEDULE_TO_START]: 'nobody picked its harness up',
    [TimeoutType.HEARTBEAT]: 'its heartbeat stopped',
  }[err.cause.timeoutType as string];
  return `node ${node} was lost (${why ?? 'it did not stop its harness at its time limit'})`;
}

/** A live session's tool the job's settings did not name: known from now on, and findable by Oz0Tools (T3). */
function noteTool(ctx: JobContext, tool: string, plan: SessionPlan): void {
  ctx.settings.tools[tool] = plan.settings[tool];
  upsertSearchAttributes([{ key: Oz0Tools, value: Object.keys(ctx.settings.tools) }]);
}

/**
 * Why an activity failed, in its own words: an ActivityFailure says only "Activity task failed"; its cause is what the
 * node said (a server that could not start, with its last words on stderr).
 */
function causeMessage(err: unknown): string {
  if (err instanceof ActivityFailure && err.cause?.message) return err.cause.message;
  return err instanceof Error ? err.message : String(err);
}
