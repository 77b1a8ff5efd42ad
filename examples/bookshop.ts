/**
 * The Bookshop from the guide for plugin authors, docs/cancellation.md: how a tool handler is made cancellable.
 *
 * - `order_book` puts a hold on a title and waits for payment. The wait takes `ctx.mcpReq.signal`, so a cancel unwinds it.
 *   Its `finally` releases the hold, with a wait that the cancel does not cut short but a timer does.
 * - `rebuild_index` is CPU work in chunks. Between chunks it yields to the event loop and then checks the signal.
 * - `rebuild_index_blocking` is the anti-pattern: the same work with no yield and no check. It runs to the end, and
 *   its result is thrown away.
 * - `stock_status` shows the holds and what is offline, so a caller can see that the cleanup ran.
 *
 * Each tool writes what happens to env `OZ0_RECEIVED_LOG` with {@link recordReceived}.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { McpServer } from '@modelcontextprotocol/server';
import type { CallToolResult } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { abortReason, recordReceived, runMain, serveHttp } from './common';
import type { HttpHandle, ServerFactory, ToolContext } from './common';

/** Options for {@link createBookshop}. */
export interface BookshopOptions {
  /** How long it takes to release a hold (a round trip to the stock system). Default 100 ms. */
  releaseMs?: number;
  /** How long the release in `finally` may take before the handler stops waiting for it. Default 5000 ms. */
  releaseTimeoutMs?: number;
}

/** A {@link ServerFactory} that can also stop every server it made. The stdio entry point uses it on SIGTERM. */
export interface Bookshop extends ServerFactory {
  /**
   * Closes every server this factory made. This aborts the signal of every handler still running. Then it waits for
   * those handlers, and their `finally` blocks, to finish. It waits at most `ms`.
   */
  shutdown(ms: number): Promise<void>;
}

/**
 * How long a stdio bookshop gives its handlers on SIGTERM. When oz0 stops a sandboxed server it closes stdin first,
 * then sends SIGTERM, then SIGKILL after `node.killGraceSeconds` (5 s by default): the process must be gone before.
 */
export const SHUTDOWN_MS = 1500;

const DEFAULT_RELEASE_MS = 100;
const DEFAULT_RELEASE_TIMEOUT_MS = 5000;

const titlesShape = {
  titles: z.array(z.string().min(1)).max(10_000),
  ms_per_title: z.number().int().min(0).max(60_000).default(200),
};

function reply(text: string, structuredContent?: Record<string, unknown>): CallToolResult {
  return { content: [{ type: 'text', text }], ...(structuredContent && { structuredContent }) };
}

/**
 * Waits for `work`, but at most `ms`. A cancelled handler has no other limit on its cleanup, so this is what stops a
 * stuck cleanup from hanging the handler.
 */
async function within(work: Promise<void>, ms: number): Promise<'done' | 'timed out' | 'failed'> {
  let timer: NodeJS.Timeout | undefined;
  const limit = new Promise<'timed out'>((resolve) => {
    timer = setTimeout(() => resolve('timed out'), ms);
  });
  try {
    return await Promise.race([
      work.then(
        () => 'done' as const,
        () => 'failed' as const,
      ),
      limit,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Indexes one book: `ms` of CPU work with nothing to await. It blocks the whole process, with every session and
 * every other call, until it returns.
 */
function indexBook(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until) {
    // The stand-in for real CPU work.
  }
}

/**
 * Lets the event loop run once. A `notifications/cancelled` that came in during the last chunk of work is handled
 * now, and it aborts `ctx.mcpReq.signal`. `await Promise.resolve()` would not do this: it runs only microtasks, and it
 * never reads a socket or a pipe.
 */
function yieldToEventLoop(): Promise<void> {
  return new Promise((resolve) => setImmediate(resolve));
}

/**
 * The Bookshop. The holds and the offline set stand in for the stock system and the search service. They are in the
 * factory's closure, so every session of one process shares them.
 */
export function createBookshop(opts?: BookshopOptions): Bookshop {
  const releaseMs = opts?.releaseMs ?? DEFAULT_RELEASE_MS;
  const releaseTimeoutMs = opts?.releaseTimeoutMs ?? DEFAULT_RELEASE_TIMEOUT_MS;
  const holds = new Set<string>();
  const offline = new Set<string>();
  const servers = new Set<McpServer>();
  const running = new Set<Promise<unknown>>();

  /** Runs a handler and keeps track of it until it settles, so that {@link Bookshop.shutdown} can wait for it. */
  const tracked = <T>(run: () => Promise<T>): Promise<T> => {
    const work = run();
    running.add(work);
    const forget = (): void => void running.delete(work);
    work.then(forget, forget);
    return work;
  };

  /** The customer is typing a card number. The wait takes the signal, as fetch does, and rejects when it aborts. */
  const takePayment = async (ms: number, signal: AbortSignal): Promise<void> => {
    await sleep(ms, undefined, { signal });
  };

  /** A round trip to the stock system. It takes no signal on purpose: it must run even after a cancel. */
  const releaseHold = async (title: string): Promise<void> => {
    await sleep(releaseMs);
    holds.delete(title);
  };

  const orderBook = async (args: { title: string; pay_ms: number }, ctx: ToolContext): Promise<CallToolResult> => {
    const { title } = args;
    holds.add(title);
    recordReceived({ tool: 'order_book', event: 'hold', title, requestId: ctx.mcpReq.id });
    try {
      await takePayment(args.pay_ms, ctx.mcpReq.signal);
      recordReceived({ tool: 'order_book', event: 'ordered', title });
      return reply(`Ordered ${JSON.stringify(title)}.`, { title });
    } catch (err) {
      if (ctx.mcpReq.signal.aborted) {
        recordReceived({ tool: 'order_book', event: 'cancelled', title, reason: abortReason(ctx.mcpReq.signal) });
      }
      throw err;
    } finally {
      // The signal may be aborted by now. releaseHold does not take it, so the cancel cannot cut it short. Nothing
      // else stops it either, so it is raced against releaseTimeoutMs. A hold left after that must expire by itself.
      const release = await within(releaseHold(title), releaseTimeoutMs);
      recordReceived({ tool: 'order_book', event: release === 'done' ? 'released' : `release ${release}`, title });
    }
  };

  const rebuildIndex = async (
    args: { titles: string[]; ms_per_title: number },
    ctx: ToolContext,
  ): Promise<CallToolResult> => {
    offline.add('search');
    recordReceived({ tool: 'rebuild_index', event: 'offline', titles: args.titles.length });
    let indexed = 0;
    try {
      for (const title of args.titles) {
        await yieldToEventLoop();
        if (ctx.mcpReq.signal.aborted) {
          recordReceived({
            tool: 'rebuild_index',
            event: 'cancelled',
            indexed,
            reason: abortReason(ctx.mcpReq.signal),
          });
          throw new Error(`rebuild_index cancelled after ${indexed} of ${args.titles.length} books`);
        }
        indexBook(args.ms_per_title);
        indexed++;
        recordReceived({ tool: 'rebuild_index', event: 'indexed', title, indexed });
      }
      return reply(`Indexed ${indexed} books.`, { indexed });
    } finally {
      // Plain synchronous cleanup: there is nothing to await, so there is nothing for a cancel to cut short.
      offline.delete('search');
      recordReceived({ tool: 'rebuild_index', event: 'online', indexed });
    }
  };

  /** The anti-pattern: it never yields and never looks at the signal. */
  const rebuildIndexBlocking = async (
    args: { titles: string[]; ms_per_title: number },
    ctx: ToolContext,
  ): Promise<CallToolResult> => {
    offline.add('search');
    recordReceived({ tool: 'rebuild_index_blocking', event: 'offline', titles: args.titles.length });
    let indexed = 0;
    try {
      for (const title of args.titles) {
        indexBook(args.ms_per_title);
        indexed++;
        recordReceived({ tool: 'rebuild_index_blocking', event: 'indexed', title, indexed });
      }
      // `aborted` is still false here even when a cancel came in during the loop: the notification is still unread in
      // the socket or the pipe. So the SDK sends this answer, and the client, which stopped waiting, drops it.
      recordReceived({
        tool: 'rebuild_index_blocking',
        event: 'finished',
        indexed,
        aborted: ctx.mcpReq.signal.aborted,
      });
      return reply(`Indexed ${indexed} books.`, { indexed });
    } finally {
      offline.delete('search');
      recordReceived({ tool: 'rebuild_index_blocking', event: 'online', indexed });
    }
  };

  const factory = (): McpServer => {
    const server = new McpServer({ name: 'oz0-example-bookshop', version: '0.1.0' });
    servers.add(server);
    server.server.onclose = () => void servers.delete(server);

    server.registerTool(
      'order_book',
      {
        title: 'Order a book',
        description:
          'Holds a copy of title while the customer pays (pay_ms). The hold is released however the call ends, ' +
          'cancelled or not.',
        inputSchema: z.object({
          title: z.string().min(1),
          pay_ms: z.number().int().min(0).max(600_000).default(30_000),
        }),
        outputSchema: z.object({ title: z.string() }),
      },
      (args, ctx) => tracked(() => orderBook(args, ctx)),
    );

    server.registerTool(
      'rebuild_index',
      {
        title: 'Rebuild the search index',
        description:
          'Takes search offline and indexes titles one by one (ms_per_title of CPU work each). It stops between two ' +
          'books when the call is cancelled. Search comes back online either way.',
        inputSchema: z.object(titlesShape),
        outputSchema: z.object({ indexed: z.number().int() }),
      },
      (args, ctx) => tracked(() => rebuildIndex(args, ctx)),
    );

    server.registerTool(
      'rebuild_index_blocking',
      {
        title: 'Rebuild the search index, ignoring cancels',
        description:
          'The anti-pattern: like rebuild_index, but it never yields and never checks for a cancel, so a cancel ' +
          'does not stop it.',
        inputSchema: z.object(titlesShape),
        outputSchema: z.object({ indexed: z.number().int() }),
      },
      (args, ctx) => tracked(() => rebuildIndexBlocking(args, ctx)),
    );

    server.registerTool(
      'stock_status',
      {
        title: 'Stock status',
        description: 'The titles on hold, and what is offline.',
        inputSchema: z.object({}),
        outputSchema: z.object({ holds: z.array(z.string()), offline: z.array(z.string()) }),
        annotations: { readOnlyHint: true, openWorldHint: false },
      },
      async () => {
        const status = { holds: [...holds].sort(), offline: [...offline].sort() };
        return reply(JSON.stringify(status), status);
      },
    );

    return server;
  };

  return Object.assign(factory, {
    async shutdown(ms: number): Promise<void> {
      await Promise.allSettled([...servers].map((s) => s.close()));
      await within(
        Promise.allSettled([...running]).then(() => undefined),
        ms,
      );
    },
  });
}

/** Starts the bookshop on Streamable HTTP (port 0 picks a free port). */
export async function startBookshopServer(port = 0, opts?: BookshopOptions): Promise<HttpHandle> {
  return serveHttp(createBookshop(opts), port);
}

if (require.main === module) {
  const shop = createBookshop();
  const argv = process.argv.slice(2);
  if (!argv.some((arg) => arg === '--http' || arg.startsWith('--http='))) {
    // Node's default for SIGTERM is to exit at once, without running any finally block. oz0 stops a sandboxed
    // (stdio) server with SIGTERM, so this handler gives the cleanups SHUTDOWN_MS to run first. In --http mode,
    // runMain handles SIGTERM itself.
    process.once('SIGTERM', () => void shop.shutdown(SHUTDOWN_MS).finally(() => process.exit(0)));
  }
  runMain(shop, argv).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
