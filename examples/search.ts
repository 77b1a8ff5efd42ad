/**
 * A remote search server that resumes (SPEC P3): its listing says `_meta["oz0/resume"]: true`, each progress
 * notification carries a resume token, and a request whose `_meta["oz0/resume"]` names a token goes on from
 * there instead of searching again what was searched. Run it over Streamable HTTP:
 *
 *   node dist/examples/search.js --http 8931
 */
import { McpServer } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { RESUME_META, progress, readOnly, resumeRequest } from '../plugin';
import { abortableSleep, idempotencyKey, recordReceived, runMain, serveHttp } from './common';
import type { HttpHandle, ServerFactory, ToolContext } from './common';

/** A token says where the search got to: `shard:<n>` after n shards. Opaque to oz0. */
function tokenFor(shard: number): string {
  return `shard:${shard}`;
}

function shardOf(token: string): number | undefined {
  const match = /^shard:(\d+)$/.exec(token);
  return match ? Number(match[1]) : undefined;
}

/** Where a request starts: the shard after its resume token, or the first. */
export function startShard(ctx: ToolContext): number {
  const resume = resumeRequest(ctx);
  return resume ? (shardOf(resume.token) ?? 0) : 0;
}

export interface SearchOptions {
  /**
   * For tests: the k-th request of each key stops answering after `stallAt[k-1]` shards (0: before any)
   * and waits to be cancelled, as a server does when the service behind it hangs.
   */
  stallAt?: (number | undefined)[];
  /** For tests: tokens that break the rules (a space is not allowed), which oz0 must ignore. */
  badTokens?: boolean;
}

export function createSearch(opts: SearchOptions = {}): ServerFactory {
  const requests = new Map<string, number>();
  return () => {
    const server = new McpServer({ name: 'oz0-example-search', version: '1.0.0' });
    server.registerTool(
      'search',
      {
        description: 'Search every shard for a query; resumes where an earlier attempt got to.',
        inputSchema: z.object({
          q: z.string(),
          shards: z.number().int().min(1).max(1000).default(4),
          shard_ms: z.number().int().default(200),
        }),
        ...readOnly({ openWorld: true, resume: true }),
      },
      async ({ q, shards, shard_ms }, ctx) => {
        const key = idempotencyKey(ctx);
        const from = startShard(ctx);
        recordReceived({ tool: 'search', key, from, resume: ctx.mcpReq._meta?.[RESUME_META] });
        const progressToken = ctx.mcpReq._meta?.progressToken;
        const nth = (requests.get(key ?? '') ?? 0) + 1;
        requests.set(key ?? '', nth);
        const stallAfter = opts.stallAt?.[nth - 1];
        for (let shard = from; shard < shards; shard++) {
          if (stallAfter !== undefined && shard - from === stallAfter) {
            // Hang until the node gives up on this attempt (its time limit) and cancels it.
            await abortableSleep(10 * 60_000, ctx.mcpReq.signal);
            return { content: [{ type: 'text', text: 'stopped' }], isError: true };
          }
          if ((await abortableSleep(shard_ms, ctx.mcpReq.signal)) === 'aborted') {
            return { content: [{ type: 'text', text: 'cancelled' }], isError: true };
          }
          // One unit of work, counted so a test can see that a resumed call redoes none.
          recordReceived({ tool: 'search', event: 'work', key, shard });
          if (opts.badTokens && progressToken !== undefined) {
            // Past the kit on purpose: progress() refuses a token that breaks the rule, and this one must reach oz0.
            await ctx.mcpReq.notify({
              method: 'notifications/progress',
              params: {
                progressToken,
                progress: shard + 1,
                total: shards,
                _meta: { [RESUME_META]: `shard ${shard + 1}` },
              },
            });
          } else {
            await progress(ctx, shard + 1, shards, tokenFor(shard + 1));
          }
        }
        return {
          content: [{ type: 'text', text: `searched ${shards} shards for "${q}"` }],
          structuredContent: { shards },
        };
      },
    );
    return server;
  };
}

export function startSearchServer(port = 0, opts?: SearchOptions): Promise<HttpHandle> {
  return serveHttp(createSearch(opts), port);
}

if (require.main === module) {
  runMain(createSearch()).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
