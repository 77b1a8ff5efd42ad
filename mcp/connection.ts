/**
 * One live MCP connection with one server: its client, the protocol revision it negotiated, its listing (read once
 * and again on list_changed), the progress watchers of the calls running on it, and how many attempts use it.
 */
import {
  CLIENT_CAPABILITIES_META_KEY,
  CLIENT_INFO_META_KEY,
  PROTOCOL_VERSION_META_KEY,
  ProtocolError,
  SdkError,
  SdkErrorCode,
} from '@modelcontextprotocol/client';
import type {
  Client,
  ClientCapabilities,
  Implementation,
  JSONRPCMessage,
  JSONRPCNotification,
  ServerCapabilities,
  Tool,
  Transport,
} from '@modelcontextprotocol/client';
import { ProgressNotificationSchema } from '@modelcontextprotocol/core';
import type { ServerKind } from '../common/config';
import { LEGACY_PROTOCOL, MODERN_PROTOCOL, TASKS_EXTENSION } from '../model/protocol';
import { saying } from '../common/last-words';

/** How long a server has to answer `server/discover`, `initialize` or a page of `tools/list` before the attempt fails. */
export const CONNECT_TIMEOUT_MS = 30_000;

export type ProgressParams = {
  progressToken: string | number;
  progress: number;
  total?: number;
  message?: string;
  _meta?: Record<string, unknown>;
};

/** How many cancelled request ids a connection remembers, waiting for a late answer to drop. */
const CANCELLED_IDS_KEPT = 1000;

/** The ids of the requests oz0 sends itself: strings, so they never meet the SDK's numeric ids on one channel. */
const OWN_ID_PREFIX = 'oz0-';

/** What {@link ServerConnection.take} did with a message: oz0 took it, or the SDK should have it. */
export type Taken = 'progress' | 'watched' | 'own answer' | 'late answer' | undefined;

/** What a request oz0 sends itself answers: its result as it came (JSON), or the JSON-RPC error as a ProtocolError. */
type OwnAnswer = (answer: { result: Record<string, unknown> } | { error: ProtocolError }) => void;

export class ServerConnection {
  private listing?: Promise<Tool[]>;
  private readonly progressWatchers = new Map<string, (params: ProgressParams) => void>();
  /** Notifications oz0 reads itself, by method (the tasks' status: ./task-extension.ts). */
  private readonly notificationWatchers = new Map<string, Set<(message: JSONRPCNotification) => void>>();
  /** Requests this connection cancelled: a server may still answer one (e.g. -32800 "Request cancelled"). */
  private readonly cancelledIds = new Set<string | number>();
  private readonly ownRequests = new Map<string, OwnAnswer>();
  /** O2: requests whose JSON-RPC id a span waits for, by the `traceparent` in their `_meta`. */
  private readonly sentWatchers = new Map<string, (id: string | number) => void>();
  private ownIds = 0;
  private inUse = 0;
  lastUsed = Date.now();
  closed = false;

  constructor(
    readonly server: string,
    readonly kind: ServerKind,
    readonly client: Client,
    private readonly transport: Transport,
    private readonly identity: { clientInfo: Implementation; capabilities: ClientCapabilities },
    /** A stdio server's process: whether it is isolated, the limit it was stopped for (I1, I4), its last words. */
    private readonly process?: {
      readonly isolated: boolean;
      stoppedFor(): string | undefined;
      refusedSince(since: number): string[];
      lastWords(): Promise<string | undefined>;
    },
  ) {}

  /** The revision this connection speaks: 2026-07-28, or what the `initialize` handshake agreed. */
  get protocol(): string {
    return this.client.getNegotiatedProtocolVersion() ?? LEGACY_PROTOCOL;
  }

  /** Whether it speaks the stateless core (2026-07-28): no session, a `_meta` envelope on every request. */
  get modern(): boolean {
    return this.client.getProtocolEra() === 'modern';
  }

  get capabilities(): ServerCapabilities | undefined {
    return this.client.getServerCapabilities();
  }

  /** SEP-2663: the server takes tasks as the extension (2026-07-28), and decides per request whether a call is one. */
  get offersTaskExtension(): boolean {
    return this.modern && this.capabilities?.extensions?.[TASKS_EXTENSION] !== undefined;
  }

  /** SEP-1686 (2025-11-25): the server said at initialize that it takes `tools/call` as a task. */
  get offersLegacyTasks(): boolean {
    return !this.modern && this.capabilities?.tasks?.requests?.tools?.call !== undefined;
  }

  /** The listing is stale: the server said so (list_changed, or a change event on 2026-07-28's listen stream). */
  listChanged(): void {
    this.listing = undefined;
  }

  /** The server's tools, cached for the connection until it says its list changed; `fresh` reads them anew. */
  listTools(fresh = false): Promise<Tool[]> {
    if (fresh) this.listing = undefined;
    this.listing ??= this.fetchListing();
    return this.listing;
  }

  private async fetchListing(): Promise<Tool[]> {
    const tools: Tool[] = [];
    let cursor: string | undefined;
    try {
      do {
        // Page by page (an explicit cursor is never capped by the SDK), never from its response cache: a remote
        // listing is read for every call so that a change is caught even without list_changed (A2).
        const page = await this.client.listTools(cursor ? { cursor } : {}, {
          timeout: CONNECT_TIMEOUT_MS,
          cacheMode: 'bypass',
        });
        tools.push(...page.tools);
        cursor = page.nextCursor;
      } while (cursor && tools.length < 10_000);
    } catch (err) {
      this.listing = undefined;
      throw err;
    }
    return tools;
  }

  /**
   * Calls fn with each progress notification for `token`, as it arrives. oz0 reads progress off the transport
   * itself: the SDK hands notifications on a tick later than responses, so it drops the last progress a server
   * sends just before its answer (still so in @modelcontextprotocol/client 2.4.0: `_onnotification` runs after the
   * response handler).
   */
  watchProgress(token: string, fn: (params: ProgressParams) => void): () => void {
    this.progressWatchers.set(token, fn);
    return () => this.progressWatchers.delete(token);
  }

  /**
   * Calls fn with each notification of `method` the server sends, before the SDK sees it, until unwatched. While
   * nobody watches a method, its notifications go to the SDK, which drops those it has no handler for.
   */
  watchNotifications(method: string, fn: (message: JSONRPCNotification) => void): () => void {
    const watchers = this.notificationWatchers.get(method) ?? new Set();
    this.notificationWatchers.set(method, watchers.add(fn));
    return () => {
      watchers.delete(fn);
      if (watchers.size === 0 && this.notificationWatchers.get(method) === watchers)
        this.notificationWatchers.delete(method);
    };
  }

  /** The Streamable HTTP session's id, where the server gave one (2025-11-25); none on stdio or 2026-07-28. */
  get sessionId(): string | undefined {
    return this.transport.sessionId;
  }

  /** Calls fn with the JSON-RPC id of the request sent with this `traceparent` in its `_meta`, until unwatched. */
  watchSent(traceparent: string, fn: (id: string | number) => void): () => void {
    this.sentWatchers.set(traceparent, fn);
    return () => this.sentWatchers.delete(traceparent);
  }

  /** Notes what the SDK sends: a `notifications/cancelled` makes its request's late answer expected protocol traffic. */
  noteSent(message: JSONRPCMessage): void {
    if (this.sentWatchers.size > 0 && 'id' in message && 'method' in message) this.noteRequest(message);
    if (!('method' in message) || message.method !== 'notifications/cancelled' || 'id' in message) return;
    const id = (message.params as { requestId?: unknown } | undefined)?.requestId;
    if (typeof id !== 'string' && typeof id !== 'number') return;
    this.rememberCancelled(id);
  }

  private noteRequest(message: { id: string | number; params?: { _meta?: Record<string, unknown> } }): void {
    const traceparent = message.params?._meta?.traceparent;
    if (typeof traceparent === 'string') this.sentWatchers.get(traceparent)?.(message.id);
  }

  private rememberCancelled(id: string | number): void {
    this.cancelledIds.add(id);
    if (this.cancelledIds.size > CANCELLED_IDS_KEPT) this.cancelledIds.delete(this.cancelledIds.values().next().value!);
  }

  /**
   * Takes what oz0 reads itself, before the SDK sees it. A progress notification goes to its watcher, a watched
   * notification (a task's status, which wakes the attempt that polls it) to its watchers, the answer to a request oz0 sent itself goes to that request; one nobody watches
   * (a call already stopped) is dropped too, as is the late answer to a request oz0 cancelled: the SDK would only
   * report either as an error ("unknown token", "unknown message ID"), and both are the protocol at work.
   */
  take(message: JSONRPCMessage): Taken {
    if ('method' in message) {
      const watchers = this.notificationWatchers.get(message.method);
      if (watchers && !('id' in message)) {
        for (const fn of [...watchers]) fn(message);
        return 'watched';
      }
      if (message.method !== 'notifications/progress') return undefined;
      const parsed = ProgressNotificationSchema.safeParse(message);
      if (!parsed.success) return undefined;
      this.progressWatchers.get(String(parsed.data.params.progressToken))?.(parsed.data.params as ProgressParams);
      return 'progress';
    }
    const id = 'id' in message ? message.id : undefined;
    if (typeof id === 'string' && id.startsWith(OWN_ID_PREFIX)) {
      const answer = this.ownRequests.get(id);
      if (!answer) return 'late answer';
      this.ownRequests.delete(id);
      if ('error' in message)
        answer({ error: new ProtocolError(message.error.code, message.error.message, message.error.data) });
      else if ('result' in message) answer({ result: message.result as Record<string, unknown> });
      return 'own answer';
    }
    return id !== undefined && id !== null && this.cancelledIds.delete(id) ? 'late answer' : undefined;
  }

  /**
   * A request oz0 sends itself, on this connection's transport, and its answer as the server sent it. For 2026-07-28
   * only, where a `tools/call` may be answered with a task (SEP-2663): @modelcontextprotocol/client 2.4.0 refuses any
   * `resultType` but `complete` and `input_required` before a caller sees the result
   * (modelcontextprotocol/typescript-sdk#2637), so oz0 cannot take a task answer through `client.callTool`.
   *
   * The request goes as given: its `params._meta` carries the 2026-07-28 envelope ({@link envelope}; the tasks
   * extension's requests declare it there, ./task-extension.ts). Its stop is the protocol's cancel (C2): on Streamable
   * HTTP the request's stream is closed, on stdio `notifications/cancelled` goes out with the stop's words.
   */
  async ownRequest(
    method: string,
    params: Record<string, unknown>,
    opts: { signal: AbortSignal; timeoutMs: number },
  ): Promise<Record<string, unknown>> {
    if (!this.modern) throw new Error(`${method} as oz0's own request needs a 2026-07-28 connection`);
    if (this.closed) throw new SdkError(SdkErrorCode.ConnectionClosed, 'the connection is closed');
    const id = `${OWN_ID_PREFIX}${++this.ownIds}`;
    const message = { jsonrpc: '2.0' as const, id, method, params };
    // A fresh controller per request: the stream of this request only (the SDK's transport follows its signal).
    const requestStream = new AbortController();
    return new Promise<Record<string, unknown>>((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        opts.signal.removeEventListener('abort', onStop);
        this.ownRequests.delete(id);
      };
      const stop = (reason: unknown) => {
        done();
        this.cancelOwn(id, requestStream, reason);
        reject(reason instanceof Error ? reason : new SdkError(SdkErrorCode.RequestTimeout, String(reason)));
      };
      const onStop = () => stop(opts.signal.reason);
      const timer = setTimeout(
        () => stop(new SdkError(SdkErrorCode.RequestTimeout, `${method} got no answer in ${opts.timeoutMs} ms`)),
        opts.timeoutMs,
      );
      this.ownRequests.set(id, (answer) => {
        done();
        if ('error' in answer) reject(answer.error);
        else resolve(answer.result);
      });
      if (opts.signal.aborted) return onStop();
      opts.signal.addEventListener('abort', onStop, { once: true });
      this.transport.send(message, { requestSignal: requestStream.signal }).catch((err: unknown) => {
        if (!this.ownRequests.has(id)) return;
        done();
        reject(err instanceof Error ? err : new Error(String(err)));
      });
    });
  }

  /**
   * The 2026-07-28 `_meta` envelope of a request oz0 sends itself: the revision, who oz0 is, what it offers, with
   * `extensions` declared beside its own.
   */
  envelope(extensions: Record<string, object> = {}): Record<string, unknown> {
    const { clientInfo, capabilities } = this.identity;
    return {
      [PROTOCOL_VERSION_META_KEY]: MODERN_PROTOCOL,
      [CLIENT_INFO_META_KEY]: clientInfo,
      [CLIENT_CAPABILITIES_META_KEY]: Object.keys(extensions).length
        ? { ...capabilities, extensions: { ...capabilities.extensions, ...extensions } }
        : capabilities,
    };
  }

  /** C2 for a request oz0 sent itself: the request's stream closed (Streamable HTTP), else `notifications/cancelled`. */
  private cancelOwn(id: string, requestStream: AbortController, reason: unknown): void {
    if (this.transport.hasPerRequestStream === true) return requestStream.abort(reason);
    this.rememberCancelled(id);
    const notification = {
      jsonrpc: '2.0' as const,
      method: 'notifications/cancelled',
      params: {
        requestId: id,
        reason: reason instanceof Error ? reason.message : String(reason),
        _meta: this.envelope(),
      },
    };
    this.transport.send(notification).catch(() => undefined);
  }

  /** Whether the server runs in a sandbox of its own; false for a plugin's or a remote server. */
  get isolated(): boolean {
    return this.process?.isolated ?? false;
  }

  /** The limit the server's sandbox went past and was stopped for (I4), in words. */
  stoppedFor(): string | undefined {
    return this.process?.stoppedFor();
  }

  /** I3: what the server's sandbox's network refused since `since` (ms), in words: an attempt's note says them. */
  refusedSince(since: number): string[] {
    return this.process?.refusedSince(since) ?? [];
  }

  /**
   * A request's failure, and what the server said as it went when its process has ended (STYLE "Failures say why"):
   * how it ended and its last words on stderr, after the failure's own words ("Connection closed").
   */
  async explained(err: unknown): Promise<unknown> {
    return saying(err, await this.process?.lastWords());
  }

  get busy(): boolean {
    return this.inUse > 0;
  }

  use(): () => void {
    this.inUse++;
    this.lastUsed = Date.now();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.inUse--;
      this.lastUsed = Date.now();
    };
  }

  /** Ends the connection; for a process, stops its whole tree first. */
  async close(): Promise<void> {
    this.closed = true;
    await this.transport.close();
    await this.client.close().catch(() => undefined);
  }
}
