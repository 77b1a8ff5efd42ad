import * as fs from 'node:fs';
import * as path from 'node:path';
import { McpServer } from '@modelcontextprotocol/server';
import { ProtocolError, ProtocolErrorCode } from '@modelcontextprotocol/server';
import { z } from 'zod';
import {
  abortReason,
  abortableSleep,
  canonicalJson,
  idempotencyKey,
  progressNotifier,
  recordReceived,
  runMain,
  serveHttp,
  toolError,
} from './common';
import type { HttpHandle, ServerFactory } from './common';
import { RESUME_META } from '../plugin';

/** Options for {@link createReader}. */
export interface ReaderOptions {
  /**
   * Where the keys of first attempts are remembered across restarts; default env `READER_STATE`, else
   * `.oz0/reader-seen.json`, relative to the working directory.
   */
  stateFile?: string;
}

/** Exit code of the deliberate crash in `read_pages` with `crash_first_attempt`. */
export const CRASH_EXIT_CODE = 3;

/** Resolves the seen-keys file from the options, env `READER_STATE`, or the default. */
export function readerStateFile(opts?: ReaderOptions): string {
  return path.resolve(opts?.stateFile ?? process.env.READER_STATE ?? path.join('.oz0', 'reader-seen.json'));
}

function loadSeen(file: string): Set<string> {
  try {
    return new Set(JSON.parse(fs.readFileSync(file, 'utf8')) as string[]);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return new Set();
    throw err;
  }
}

/**
 * Adds `id` to the seen set on disk and says whether it is new. The write is synchronous and renamed into place so it
 * is complete before the crash that may follow it; the file is re-read each time because the process that wrote it
 * last may be the one that crashed.
 */
function markSeen(file: string, id: string): boolean {
  const seen = loadSeen(file);
  if (seen.has(id)) return false;
  seen.add(id);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, JSON.stringify([...seen]));
  fs.renameSync(tmp, file);
  return true;
}

/**
 * A read-only example server: `read_pages` (slow, reports progress, can fail its first attempt on purpose), `echo`,
 * and `sleep` (no hints, so oz0 gives it one attempt only).
 */
export function createReader(opts?: ReaderOptions): ServerFactory {
  const stateFile = readerStateFile(opts);

  return () => {
    const server = new McpServer({ name: 'oz0-example-reader', version: '0.1.0' });

    server.registerTool(
      'read_pages',
      {
        title: 'Read pages',
        description:
          'Reads `pages` pages, page_ms each, reporting progress per page. crash_first_attempt exits the server ' +
          'after page 1 the first time a key is seen; fail_first_attempt fails that attempt instead.',
        inputSchema: z.object({
          pages: z.number().int().min(1).max(1000).default(4),
          page_ms: z.number().int().min(0).max(60_000).default(200),
          crash_first_attempt: z.boolean().default(false),
          fail_first_attempt: z.boolean().default(false),
        }),
        outputSchema: z.object({ pages: z.number().int() }),
        annotations: { readOnlyHint: true, openWorldHint: false },
      },
      async (args, ctx) => {
        const key = idempotencyKey(ctx);
        recordReceived({
          tool: 'read_pages',
          key,
          args,
          progressToken: ctx.mcpReq._meta?.progressToken,
          resume: ctx.mcpReq._meta?.[RESUME_META],
          requestId: ctx.mcpReq.id,
        });
        // Without a key, the arguments stand in for it, so a plain client can still see "first fails, retry works".
        const firstAttempt =
          (args.crash_first_attempt || args.fail_first_attempt) &&
          markSeen(stateFile, key ?? `args:${canonicalJson(args)}`);
        const progress = progressNotifier(ctx);

        for (let page = 1; page <= args.pages; page++) {
          if ((await abortableSleep(args.page_ms, ctx.mcpReq.signal)) === 'aborted') {
            const reason = abortReason(ctx.mcpReq.signal);
            recordReceived({ event: 'cancelled', tool: 'read_pages', key, requestId: ctx.mcpReq.id, reason, page });
            // The SDK sends no response for a cancelled request, so this result goes nowhere.
            return toolError(`cancelled at page ${page}: ${reason}`);
          }
          await progress(page, args.pages, `page ${page}`);
          if (firstAttempt && page === 1) {
            if (args.crash_first_attempt) {
              recordReceived({ event: 'crash', tool: 'read_pages', key, requestId: ctx.mcpReq.id });
              process.exit(CRASH_EXIT_CODE);
            }
            recordReceived({ event: 'fail', tool: 'read_pages', key, requestId: ctx.mcpReq.id });
            // McpServer catches whatever a tool handler throws (McpError included, except UrlElicitationRequired)
            // and answers with a tool error result: isError true, text "MCP error -32603: first attempt fails on
            // purpose". So the client sees a failed call, not a JSON-RPC error response.
            throw new ProtocolError(ProtocolErrorCode.InternalError, 'first attempt fails on purpose');
          }
        }
        return {
          content: [{ type: 'text', text: `read ${args.pages} pages` }],
          structuredContent: { pages: args.pages },
        };
      },
    );

    server.registerTool(
      'echo',
      {
        title: 'Echo',
        description: 'Returns text unchanged.',
        inputSchema: z.object({ text: z.string() }),
        annotations: { readOnlyHint: true, openWorldHint: false },
      },
      async (args, ctx) => {
        recordReceived({ tool: 'echo', key: idempotencyKey(ctx), args, requestId: ctx.mcpReq.id });
        return { content: [{ type: 'text', text: args.text }] };
      },
    );

    server.registerTool(
      'sleep',
      {
        title: 'Sleep',
        description: 'Sleeps ms milliseconds; cancellable. Says "started" as progress when asked for progress.',
        inputSchema: z.object({ ms: z.number().int().min(0).max(600_000) }),
      },
      async (args, ctx) => {
        const key = idempotencyKey(ctx);
        recordReceived({ tool: 'sleep', event: 'start', key, args, requestId: ctx.mcpReq.id });
        // A client that asked for progress hears that the sleep began: it may cancel a call it knows is running.
        await progressNotifier(ctx)(0, args.ms, 'started');
        if ((await abortableSleep(args.ms, ctx.mcpReq.signal)) === 'aborted') {
          const reason = abortReason(ctx.mcpReq.signal);
          recordReceived({ tool: 'sleep', event: 'cancelled', key, requestId: ctx.mcpReq.id, reason });
          return toolError(`cancelled: ${reason}`);
        }
        return { content: [{ type: 'text', text: `slept ${args.ms}` }] };
      },
    );

    return server;
  };
}

/** Starts the reader on Streamable HTTP (port 0 picks a free port). */
export async function startReaderServer(port = 0, opts?: ReaderOptions): Promise<HttpHandle> {
  return serveHttp(createReader(opts), port);
}

if (require.main === module) {
  runMain(createReader()).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
