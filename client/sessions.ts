/**
 * H9: a harness outside the job. Any Temporal client drives a job's waiting `{ "session": { "external": true } }` with
 * the Updates the node's gateway uses — open, call a tool, cancel a call, close with a result — under the same keys,
 * policy, trace and UI as a harness the node runs. oz0 decides each call's key and makes it durably on the session's
 * node; this helper only sends the Updates.
 *
 * ```ts
 * const session = await openSession(client, 'job-42');
 * const found = await session.callTool('ledger.lookup_order', { order_id: 'o-1' });
 * await session.close({ done: true });
 * ```
 */
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import type { Client } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import type { CallToolResult } from '@modelcontextprotocol/client';
import { IDEMPOTENCY_KEY_META } from '../model/protocol';
import { CallProgressStateSchema } from '../model/schemas';
import type { Progress } from '../model/schemas';
import { SessionUpdateError, admitted, offered, sessionCall } from '../common/session-client';
import { closeSessionUpdate, openSessionUpdate, sessionCallQuery } from '../model/messages';
import { Oz0Tenant } from '../model/job';
import { openedWith } from '../data';
import type { AnswerReader, ToolAnswer } from '../data';

export { SessionUpdateError };

/** How often `onProgress` looks at the call's heartbeat. */
const PROGRESS_POLL_MS = 250;

export interface CallOptions {
  /** Aborting it cancels the call: its server gets `notifications/cancelled` with the abort's reason (H5). */
  signal?: AbortSignal;
  /** The call's progress as its server reports it (P1, H6), read from its activity's heartbeat. */
  onProgress?: (progress: Progress) => void;
}

/** A call's answer: a CallToolResult, with the key oz0 gave the call in `_meta["oz0/idempotency_key"]`. */
export type SessionCallResult = CallToolResult & { key?: string };

/** An open live session of a running job. */
export class LiveSession {
  constructor(
    private readonly client: Client,
    readonly jobId: string,
    /** `s1`, `s2`, … */
    readonly session: string,
    /** 1, or more when the session was opened again after its node was lost: its calls are made again from the start. */
    readonly run: number,
    /** The node its calls run on. */
    readonly node: string,
    /** D1: reads an answer the job keeps in the payload store back whole (without, a stored answer comes as its claim). */
    private readonly answers?: AnswerReader,
  ) {}

  private get target() {
    return { client: this.client, jobId: this.jobId, session: this.session, run: this.run };
  }

  /**
   * One call of `<server>.<function>`; resolves with its result once the job has made it (an error result stays one,
   * and so does a call this caller cancelled through `signal`: its result says it was cancelled).
   */
  async callTool(tool: string, args: Record<string, unknown> = {}, opts: CallOptions = {}): Promise<SessionCallResult> {
    const callId = randomUUID();
    opts.signal?.throwIfAborted();
    const onAbort = () => {
      const reason = typeof opts.signal?.reason === 'string' ? opts.signal.reason : 'cancelled by its caller';
      sessionCall(this.target)
        .cancel(callId, reason)
        .catch(() => undefined);
    };
    opts.signal?.addEventListener('abort', onAbort, { once: true });
    const stopWatching = opts.onProgress ? this.watchProgress(callId, opts.onProgress) : undefined;
    try {
      const out = await admitted(this.jobId, () =>
        sessionCall(this.target).call({ callId, tool, args, progress: opts.onProgress !== undefined }),
      );
      const result = out.result.stored && this.answers ? await this.readWhole(out.result) : out.result;
      return {
        ...result,
        content: result.content as CallToolResult['content'],
        ...(out.key ? { key: out.key, _meta: { ...(result._meta ?? {}), [IDEMPOTENCY_KEY_META]: out.key } } : {}),
      };
    } finally {
      stopWatching?.();
      opts.signal?.removeEventListener('abort', onAbort);
    }
  }

  /** D1: an answer its step keeps as a claim, read whole from the store for the job's own tenant. */
  private async readWhole(result: ToolAnswer): Promise<ToolAnswer> {
    const tenant = (await this.client.workflow.getHandle(this.jobId).describe()).typedSearchAttributes.get(Oz0Tenant);
    return this.answers!.read(result, { jobId: this.jobId, tenant: tenant ?? '' });
  }

  /** Ends the session with its result (any JSON; a string is text); `isError` makes it an error result. */
  async close(result?: unknown, opts: { isError?: boolean } = {}): Promise<void> {
    await offered(() =>
      this.client.workflow.getHandle(this.jobId).executeUpdate(closeSessionUpdate, {
        args: [{ session: this.session, run: this.run, result, ...(opts.isError ? { isError: true } : {}) }],
      }),
    );
  }

  /** Polls the call's activity heartbeat (where oz0 keeps its progress, P1) until stopped. */
  private watchProgress(callId: string, onProgress: (p: Progress) => void): () => void {
    const handle = this.client.workflow.getHandle(this.jobId);
    let last = -Infinity;
    let stopped = false;
    const poll = async () => {
      while (!stopped) {
        await new Promise((r) => setTimeout(r, PROGRESS_POLL_MS));
        const where = await handle.query(sessionCallQuery, callId).catch(() => null);
        if (!where || stopped) continue;
        const described = await handle.describe().catch(() => undefined);
        const pending = described?.raw.pendingActivities?.find((a) => a.activityId === where.activityId);
        const payload = pending?.heartbeatDetails?.payloads?.[0];
        if (!payload) continue;
        // D4: the heartbeat is sealed with the job's tenant's key, as everything the job carries.
        const context = { type: 'workflow' as const, namespace: this.client.options.namespace, workflowId: this.jobId };
        const [opened] = await openedWith(this.client.options.loadedDataConverter, [payload], context).catch(() => []);
        if (!opened) continue;
        const state = CallProgressStateSchema.safeParse(defaultPayloadConverter.fromPayload(opened));
        const p = state.success ? state.data : undefined;
        if (p?.progress === undefined || p.progress <= last) continue;
        last = p.progress;
        onProgress(p.total === undefined ? { progress: p.progress } : { progress: p.progress, total: p.total });
      }
    };
    void poll();
    return () => {
      stopped = true;
    };
  }
}

/**
 * H9: opens the job's external session (again, after a lost node: its next run) from any Temporal client. A job that
 * has not reached its external session yet is waited for, up to `waitMs` (default a minute).
 */
export async function openSession(
  client: Client,
  jobId: string,
  opts: { client?: string; waitMs?: number; answers?: AnswerReader } = {},
): Promise<LiveSession> {
  const deadline = Date.now() + (opts.waitMs ?? 60_000);
  const open = () =>
    offered(() =>
      client.workflow
        .getHandle(jobId)
        .executeUpdate(openSessionUpdate, { args: [{ client: opts.client ?? `${os.hostname()}/${process.pid}` }] }),
    );
  for (;;) {
    try {
      const opened = await open();
      return new LiveSession(client, jobId, opened.session, opened.run, opened.node, opts.answers);
    } catch (err) {
      const notYet = err instanceof SessionUpdateError && /no external session waiting/.test(err.message);
      if (!notYet || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 250));
    }
  }
}
