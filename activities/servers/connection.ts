/**
 * One live MCP session with one server: its client, its listing (read once and again on list_changed), the progress
 * watchers of the calls running on it, and how many attempts use it.
 */
import type { Client } from '@modelcontextprotocol/sdk/client/index.js';
import {
  ProgressNotificationSchema,
  TaskStatusNotificationSchema,
  ToolListChangedNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';
import type { JSONRPCMessage, ProgressNotification, Tool } from '@modelcontextprotocol/sdk/types.js';
import type { Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { ServerKind } from '../../common/config';

/** How long a server has to answer `initialize` or a page of `tools/list` before the attempt fails. */
export const CONNECT_TIMEOUT_MS = 30_000;

export type ProgressParams = ProgressNotification['params'];

/** How many cancelled request ids a session remembers, waiting for a late answer to drop. */
const CANCELLED_IDS_KEPT = 1000;

/** What {@link ServerConnection.take} did with a message: oz0 took it, or the SDK should have it. */
export type Taken = 'progress' | 'task status' | 'late answer' | undefined;

export class ServerConnection {
  private listing?: Promise<Tool[]>;
  private readonly progressWatchers = new Map<string, (params: ProgressParams) => void>();
  private readonly taskWatchers = new Map<string, () => void>();
  /** Requests this session cancelled: a server may still answer one (e.g. -32800 "Request cancelled"). */
  private readonly cancelledIds = new Set<string | number>();
  private inUse = 0;
  lastUsed = Date.now();
  closed = false;

  constructor(
    readonly server: string,
    readonly kind: ServerKind,
    readonly client: Client,
    private readonly transport: Transport,
    /** A stdio server's process: whether it is isolated, and the limit it was stopped for (I1, I4). */
    private readonly process?: { readonly isolated: boolean; stoppedFor(): string | undefined },
  ) {
    client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
      this.listing = undefined;
    });
  }

  /** The server's tools, cached for the session until it says its list changed; `fresh` reads them anew. */
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
        const page = await this.client.listTools(cursor ? { cursor } : undefined, { timeout: CONNECT_TIMEOUT_MS });
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
   * sends just before its answer.
   */
  watchProgress(token: string, fn: (params: ProgressParams) => void): () => void {
    this.progressWatchers.set(token, fn);
    return () => this.progressWatchers.delete(token);
  }

  /** Calls fn when the server says the task's status changed (`notifications/tasks/status`), until unwatched. */
  watchTask(taskId: string, fn: () => void): () => void {
    this.taskWatchers.set(taskId, fn);
    return () => {
      if (this.taskWatchers.get(taskId) === fn) this.taskWatchers.delete(taskId);
    };
  }

  /** Notes what the SDK sends: a `notifications/cancelled` makes its request's late answer expected protocol traffic. */
  noteSent(message: JSONRPCMessage): void {
    if (!('method' in message) || message.method !== 'notifications/cancelled' || 'id' in message) return;
    const id = (message.params as { requestId?: unknown } | undefined)?.requestId;
    if (typeof id !== 'string' && typeof id !== 'number') return;
    this.cancelledIds.add(id);
    if (this.cancelledIds.size > CANCELLED_IDS_KEPT) this.cancelledIds.delete(this.cancelledIds.values().next().value!);
  }

  /**
   * Takes what oz0 reads itself, before the SDK sees it. A progress notification goes to its watcher, a task's status
   * wakes the attempt that polls it; one nobody watches (a call already stopped) is dropped too, as is the late answer to a request oz0 cancelled: the SDK
   * would only report either as an error ("unknown token", "unknown message ID"), and both are the protocol at work.
   */
  take(message: JSONRPCMessage): Taken {
    if ('method' in message) {
      if (message.method === 'notifications/tasks/status') {
        const parsed = TaskStatusNotificationSchema.safeParse(message);
        if (!parsed.success) return undefined;
        this.taskWatchers.get(parsed.data.params.taskId)?.();
        return 'task status';
      }
      if (message.method !== 'notifications/progress') return undefined;
      const parsed = ProgressNotificationSchema.safeParse(message);
      if (!parsed.success) return undefined;
      this.progressWatchers.get(String(parsed.data.params.progressToken))?.(parsed.data.params);
      return 'progress';
    }
    const id = 'id' in message ? message.id : undefined;
    return id !== undefined && this.cancelledIds.delete(id) ? 'late answer' : undefined;
  }

  /** Whether the server runs in a sandbox of its own; false for a plugin's or a remote server. */
  get isolated(): boolean {
    return this.process?.isolated ?? false;
  }

  /** The limit the server's sandbox went past and was stopped for (I4), in words. */
  stoppedFor(): string | undefined {
    return this.process?.stoppedFor();
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

  /** Ends the session; for a process, stops its whole tree first. */
  async close(): Promise<void> {
    this.closed = true;
    await this.transport.close();
    await this.client.close().catch(() => undefined);
  }
}
