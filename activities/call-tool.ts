/**
 * One attempt of one call: one MCP `tools/call`, with its key, its time limit, its cancellation and its
 * heartbeats. Temporal's activity retry is the only retry layer (B5): this function never tries twice.
 */
import { ApplicationFailure, CancelledFailure, Context } from '@temporalio/activity';
import { z } from 'zod';
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import { FailureType } from '../workflows/definitions';
import type {
  AttemptRecord,
  CallInput,
  CallOutput,
  CallProgressState,
  Outcome,
  Progress,
} from '../workflows/definitions';
import type { Logger } from '../worker/logger';
import type { Lease, ServerPool } from './servers/pool';
import { attemptLimitMs, busyOf, busyVerdict, mayBeMadeAgain } from './verdicts';
import { resumePlan, resumeTokenOf } from './resume';
import type { PolicyGate, PolicyRead } from './policy-gate';
import { listingDigest, verdict } from '../workflows/policy-rules';

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
  /** How often a running attempt heartbeats; a cancel reaches it within about this long. */
  heartbeatMs: number;
}

const IGNORED_TOKEN = 'ignored an invalid resume token';

/** An answer larger than this is not handed to the job: it would not fit Temporal's history. */
export const MAX_RESULT_BYTES = 1024 * 1024;

const AttemptRecordSchema = z.object({
  attempt: z.number().int().min(1),
  outcome: z.enum(['ok', 'error', 'busy', 'timeout', 'cancelled', 'killed', 'lost', 'refused', 'failed']),
  note: z.string().optional(),
  progress: z.object({ progress: z.number(), total: z.number().optional() }).optional(),
});

const ProgressStateSchema = z.object({
  tool: z.string().optional(),
  key: z.string().optional(),
  progress: z.number().optional(),
  total: z.number().optional(),
  token: z.string().optional(),
  tokenProgress: z.object({ progress: z.number(), total: z.number().optional() }).optional(),
  invalidToken: z.boolean().optional(),
  attempts: z.array(AttemptRecordSchema).default([]),
  unsent: z.array(z.number().int()).optional(),
});

/** What the attempts before this one left in the heartbeat, with a `lost` record for any that left nothing. */
export function readPriorState(details: unknown, attempt: number): CallProgressState {
  const parsed = ProgressStateSchema.safeParse(details ?? {});
  const state: CallProgressState = parsed.success ? parsed.data : { attempts: [] };
  const attempts = state.attempts.filter((a) => a.attempt < attempt);
  const recorded = new Set(attempts.map((a) => a.attempt));
  for (let k = 1; k < attempt; k++) {
    if (!recorded.has(k))
      attempts.push({
        attempt: k,
        outcome: 'lost',
        note: "the attempt ended without a word: its node was lost or it ran past Temporal's timeout",
      });
  }
  attempts.sort((a, b) => a.attempt - b.attempt);
  return { ...state, attempts };
}

interface StopCause {
  outcome: Outcome;
  text: string;
}

/** How one attempt's request is stopped: a fresh signal per request (a shared one would leak listeners). */
class AttemptStop {
  private readonly controller = new AbortController();
  why?: StopCause;

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** The first cause wins; the MCP request is cancelled with its words as the reason. */
  stop(why: StopCause): void {
    this.why ??= why;
    this.controller.abort(this.why.text);
  }
}

/** Words for why Temporal asked the activity to stop. */
function cancelReason(reason: unknown): StopCause {
  const code = reason instanceof Error ? reason.message : String(reason);
  switch (code) {
    case 'CANCELLED':
      return { outcome: 'cancelled', text: 'oz0: job cancelled' };
    case 'WORKER_SHUTDOWN':
      return { outcome: 'lost', text: 'oz0: node shutting down' };
    case 'TIMED_OUT':
      return { outcome: 'timeout', text: "oz0: Temporal's timeout for the attempt passed" };
    default:
      return { outcome: 'cancelled', text: `oz0: stopped by Temporal (${code})` };
  }
}

function normaliseResult(raw: unknown): CallToolResult {
  const r = raw as CallToolResult & { toolResult?: unknown };
  if (r.toolResult !== undefined && r.content === undefined) {
    return { content: [{ type: 'text', text: JSON.stringify(r.toolResult) }], isError: false };
  }
  return r;
}

export async function callToolAttempt(deps: CallDeps, input: CallInput): Promise<CallOutput> {
  const ctx = Context.current();
  const attempt = ctx.info.attempt;
  // C6: the attempt's clock starts when it got its slot on the node, i.e. now.
  const startedAt = Date.now();
  const state = { ...readPriorState(ctx.info.heartbeatDetails, attempt), tool: input.tool, key: input.key };
  const lastAttempt = attempt >= input.maxAttempts;
  let progress: Progress | undefined;
  /** P5: how this attempt started (resumed, or started over and why), and tokens it ignored. */
  const startNotes: string[] = [];
  const beat = () => ctx.heartbeat(state);
  /**
   * Adds this attempt's record; the heartbeat carries it to the next attempt. An answer the call returns (`final`)
   * ends the call, so no next attempt reads it: no heartbeat is spent on it.
   */
  const record = (outcome: Outcome, why?: string, final = false): AttemptRecord[] => {
    const note = [...startNotes, why].filter(Boolean).join('; ');
    const entry: AttemptRecord = { attempt, outcome, ...(note ? { note } : {}), ...(progress ? { progress } : {}) };
    state.attempts = [...state.attempts, entry];
    if (!final) beat();
    return state.attempts;
  };
  const fail = (type: string, message: string, retryable: boolean): never => {
    throw ApplicationFailure.create({ type, message, nonRetryable: !retryable || lastAttempt, details: [state] });
  };
  // No heartbeat up front: Temporal already holds what the attempts before left, and an attempt that ends without
  // a word is read as lost. A call that runs longer than heartbeatMs beats from then on (and hears a cancel).
  const heartbeats = setInterval(beat, deps.heartbeatMs);
  const dot = input.tool.indexOf('.');
  const server = input.tool.slice(0, dot);
  const fn = input.tool.slice(dot + 1);
  let lease: Lease | undefined;
  // One stop per attempt (one request per attempt): whoever stops it first names the cause.
  const stop = new AttemptStop();
  // C5: registered before the policy is read, so a kill switch thrown from here on stops this call too.
  const unregister = deps.gate.register({
    tenant: input.tenant,
    tool: input.tool,
    stop: (why) => stop.stop({ outcome: 'killed', text: why }),
  });
  try {
    if (!deps.pool.serverConfig(server)) {
      record('failed', `this node has no server named "${server}"`);
      return fail(FailureType.unknownTool, `this node has no server named "${server}"`, false);
    }
    let tool: Tool | undefined;
    let tools: Tool[] = [];
    try {
      lease = await deps.pool.acquire(server, input.jobId);
      // A remote listing is read anew for every call, so a change is caught even without list_changed (A2).
      tools = await lease.connection.listTools(lease.connection.kind === 'remote');
      tool = tools.find((t) => t.name === fn);
    } catch (err) {
      if ((err as { outcomeUnknown?: boolean }).outcomeUnknown) {
        // B4: the server answered 429 to the session's own requests; its listing is unknown, so no retry.
        record('failed', `outcome unknown: ${(err as Error).message}`);
        return fail(FailureType.attemptFailed, `${input.tool}: ${(err as Error).message}`, false);
      }
      // Nothing was sent: any call may try again.
      state.unsent = [...(state.unsent ?? []), attempt];
      record('failed', `the server was not reachable: ${(err as Error).message}`);
      return fail(FailureType.attemptFailed, `server "${server}" was not reachable: ${(err as Error).message}`, true);
    }
    if (!tool) {
      record('failed', `server "${server}" has no function "${fn}"`);
      return fail(FailureType.unknownTool, `server "${server}" has no function "${fn}"`, false);
    }
    // A1-A3, B6, C5: the tenant's current policy, kill switches and approvals, before anything is sent. A first
    // attempt may be checked against the node's live copy; a retry reads anew (B6), and so does a refusal.
    const remote = lease.connection.kind === 'remote';
    const check = (policy: PolicyRead) =>
      verdict({
        ...policy,
        tool: input.tool,
        remote,
        listing: remote || policy.state.approvals[server] ? listingDigest(tools) : undefined,
      });
    let allowed: ReturnType<typeof verdict>;
    try {
      const policy = await deps.gate.read(input.tenant, attempt > 1 ? 0 : deps.policyMaxAgeMs, attempt === 1);
      allowed = check(policy);
      if (!allowed.allowed && policy.watched) allowed = check(await deps.gate.read(input.tenant, 0));
    } catch (err) {
      // Without the tenant's policy nothing is sent; the call may try again.
      state.unsent = [...(state.unsent ?? []), attempt];
      record('failed', `could not read the tenant's policy: ${(err as Error).message}`);
      return fail(
        FailureType.attemptFailed,
        `could not read the policy of ${input.tenant}: ${(err as Error).message}`,
        true,
      );
    }
    if (!allowed.allowed) {
      record('refused', allowed.why);
      return fail(FailureType.refused, `${input.tool}: refused: ${allowed.why}`, false);
    }
    if (stop.why) {
      record(stop.why.outcome, stop.why.text);
      return fail(FailureType.killed, `${input.tool}: ${stop.why.text}`, false);
    }
    const again = mayBeMadeAgain(tool, lease.connection.kind, allowed.approved);
    if (attempt > 1 && !again && !(state.unsent ?? []).includes(attempt - 1)) {
      record('lost', 'not made again: the attempt before may have run, and this function may not be made twice');
      return fail(FailureType.mayHaveRun, `${input.tool} (key ${input.key}) may have run: not made again`, false);
    }
    const plan = again
      ? resumePlan({
          attempt,
          kind: lease.connection.kind,
          declaresResume: tool._meta?.['oz0/resume'] === true,
          prior: state,
        })
      : {};
    if (plan.note) startNotes.push(plan.note);
    const resumable = lease.connection.kind === 'remote' && tool._meta?.['oz0/resume'] === true;
    return await makeRequest(deps, input, {
      lease,
      fn,
      again,
      resume: plan.meta,
      resumable,
      ignoredToken: () => {
        state.invalidToken = true;
        if (!startNotes.includes(IGNORED_TOKEN)) startNotes.push(IGNORED_TOKEN);
      },
      startedAt,
      lastAttempt,
      state,
      stop,
      record,
      fail,
      setProgress,
    });
  } finally {
    unregister();
    clearInterval(heartbeats);
    lease?.release();
  }

  function setProgress(p: Progress, token?: string) {
    progress = p;
    state.progress = p.progress;
    state.total = p.total;
    if (token) {
      state.token = token;
      state.tokenProgress = p;
    }
    beat();
  }
}

interface RequestContext {
  lease: Lease;
  fn: string;
  again: boolean;
  startedAt: number;
  lastAttempt: boolean;
  state: CallProgressState;
  stop: AttemptStop;
  record: (outcome: Outcome, note?: string, final?: boolean) => AttemptRecord[];
  fail: (type: string, message: string, retryable: boolean) => never;
  setProgress: (p: Progress, token?: string) => void;
  /** P3: what this attempt sends as `_meta["oz0/resume"]`, if it resumes. */
  resume?: { token: string; progress: number };
  /** The function takes resume tokens (a remote server that declares `oz0/resume`); P6: a plugin never does. */
  resumable: boolean;
  ignoredToken: () => void;
}

async function makeRequest(deps: CallDeps, input: CallInput, rc: RequestContext): Promise<CallOutput> {
  const ctx = Context.current();
  const { connection } = rc.lease;
  const remaining = attemptLimitMs(input.timeoutSeconds) - (Date.now() - rc.startedAt);
  const { stop } = rc;
  const abort = (why: StopCause) => stop.stop(why);
  const limit = setTimeout(
    () => abort({ outcome: 'timeout', text: `oz0: time limit: ${input.timeoutSeconds} s less its margin` }),
    Math.max(0, remaining),
  );
  const onCancel = () => abort(cancelReason(ctx.cancellationSignal.reason));
  if (ctx.cancellationSignal.aborted) onCancel();
  else ctx.cancellationSignal.addEventListener('abort', onCancel, { once: true });
  // MCP progress increases within one request; each attempt is a request of its own.
  let lastProgress = -Infinity;
  // P1: only a call that may be made again asks for progress, under a token of its own; progress must increase.
  const progressToken = rc.again ? `oz0:${input.key}:${ctx.info.attempt}` : undefined;
  const unwatch = progressToken
    ? connection.watchProgress(progressToken, (p) => {
        if (!Number.isFinite(p.progress) || p.progress <= lastProgress) return;
        lastProgress = p.progress;
        const reported =
          typeof p.total === 'number' ? { progress: p.progress, total: p.total } : { progress: p.progress };
        const token = rc.resumable ? resumeTokenOf(p._meta) : undefined;
        if (token && 'invalid' in token) rc.ignoredToken();
        rc.setProgress(reported, token && 'token' in token ? token.token : undefined);
      })
    : undefined;
  try {
    const raw = await connection.client.callTool(
      {
        name: rc.fn,
        arguments: input.args,
        _meta: {
          'oz0/idempotency_key': input.key,
          ...(progressToken ? { progressToken } : {}),
          ...(rc.resume ? { 'oz0/resume': rc.resume } : {}),
        },
      },
      undefined,
      {
        signal: stop.signal,
        // The request never outlives the attempt's own limit; never the SDK's 60 s default.
        timeout: Math.max(1, remaining) + 5000,
        maxTotalTimeout: Math.max(1, remaining) + 5000,
      },
    );
    const result = normaliseResult(raw);
    const size = Buffer.byteLength(JSON.stringify(result));
    if (size > MAX_RESULT_BYTES) {
      rc.record('failed', `the answer was ${(size / 1024 / 1024).toFixed(1)} MB, over oz0's limit of 1 MB`);
      return rc.fail(FailureType.attemptFailed, `${input.tool} answered ${size} bytes, over the 1 MB limit`, rc.again);
    }
    const busy = busyOf(result);
    if (busy) return handleBusy(deps, input, rc, result, busy.retryAfter);
    return output(deps, rc, result, rc.record(result.isError ? 'error' : 'ok', undefined, true));
  } catch (err) {
    if (err instanceof ApplicationFailure) throw err;
    // B4: a 429 on the POST that carried this call: nothing was made, and the server said how long to wait.
    const limited = stop.why ? undefined : connection.takeRateLimit(input.key);
    if (limited) {
      const wait = limited.retryAfter;
      const text = `${connection.server} answered HTTP 429 Too Many Requests${wait === undefined ? '' : ` (Retry-After: ${wait} s)`}; nothing was made`;
      const result: CallToolResult = { isError: true, content: [{ type: 'text', text }] };
      return handleBusy(deps, input, rc, result, wait);
    }
    return stopped(deps, input, rc, err);
  } finally {
    unwatch?.();
    clearTimeout(limit);
    ctx.cancellationSignal.removeEventListener('abort', onCancel);
  }
}

/** The job's view of an answer: content, structured content, isError, _meta; and this attempt's trace. */
function output(deps: CallDeps, rc: RequestContext, result: CallToolResult, attempts: AttemptRecord[]): CallOutput {
  return {
    result: {
      isError: result.isError === true,
      content: result.content ?? [],
      ...(result.structuredContent ? { structuredContent: result.structuredContent } : {}),
      ...(result._meta ? { _meta: result._meta } : {}),
    },
    attempts,
    node: deps.node.id,
    ...(rc.lease.connection.kind === 'sandbox' ? { sandboxQueue: deps.node.queue } : {}),
  };
}

/** B2/B3: a busy server: try again after its wait, or hand its error to the job with the wait in words. */
function handleBusy(
  deps: CallDeps,
  input: CallInput,
  rc: RequestContext,
  result: CallToolResult,
  retryAfter: number | undefined,
): CallOutput {
  const verdict = busyVerdict({ again: rc.again, lastAttempt: rc.lastAttempt, retryAfter });
  rc.record('busy', verdict.note);
  if (verdict.retry) {
    // One retry layer (B5): Temporal waits, not oz0; maximumInterval is 60 s so this delay is never cut short.
    throw ApplicationFailure.create({
      type: FailureType.busy,
      message: `${input.tool}: the server is busy; ${verdict.note.replace(/^busy: /, '')}`,
      nextRetryDelay: verdict.delayMs,
      details: [rc.state],
    });
  }
  const said = { ...result, content: [...(result.content ?? []), { type: 'text' as const, text: verdict.words }] };
  return output(deps, rc, said, rc.state.attempts);
}

/** An attempt that ended without an answer: stopped (cancel, kill, time limit, shutdown) or failed. */
async function stopped(deps: CallDeps, input: CallInput, rc: RequestContext, err: unknown): Promise<never> {
  const why = rc.stop.why;
  const { connection } = rc.lease;
  if (why) {
    // C3: a stopped call on a sandboxed server stops that server's whole process tree too.
    if (connection.kind === 'sandbox') await deps.pool.stopSandbox(connection.server, input.jobId);
    rc.record(why.outcome, why.text);
    if (why.outcome === 'cancelled') throw new CancelledFailure(why.text, [rc.state]);
    // A node going down: another node takes the next attempt, if the call may be made again.
    if (why.outcome === 'lost') return rc.fail(FailureType.nodeShutdown, `${input.tool}: ${why.text}`, rc.again);
    if (why.outcome === 'killed') return rc.fail(FailureType.killed, `${input.tool}: ${why.text}`, false);
    return rc.fail(FailureType.timeLimit, `${input.tool}: ${why.text}`, rc.again);
  }
  const message = (err as Error).message ?? String(err);
  deps.logger.warn({ tool: input.tool, key: input.key, err: message }, 'attempt failed');
  rc.record('failed', `outcome unknown: ${message}`);
  return rc.fail(FailureType.attemptFailed, `${input.tool}: ${message}`, rc.again);
}
