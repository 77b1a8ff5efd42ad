/**
 * H3: the tools a harness sees on its gateway — those of its patterns that the tenant's policy lets it call now,
 * each named `<server>.<function>`, with the hints, `_meta`, input and output schemas its server lists; a remote
 * server's only once its listing is approved (A2). Read from the node's own connections and its live policy copy.
 * A function that runs as an MCP task is listed without its `execution`: oz0 makes and follows the task itself, and
 * to the harness it is an ordinary call that answers when the task ends.
 */
import type { Tool } from '@modelcontextprotocol/client';
import type { Tool as ServedTool } from '@modelcontextprotocol/server';
import { canonicalize } from 'json-canonicalize';
import type { LoadedConfig } from '../../common/config';
import type { Logger } from '../../common/logger';
import { matchesAny } from '../../workflows/checks';
import { listingDigest, verdict } from '../../workflows/policy-rules';
import type { PolicyGate } from '../policy/gate';
import type { ServerPool } from '../servers/pool';

export interface ListingScope {
  jobId: string;
  tenant: string;
  patterns: readonly string[];
}

/** Whether a pattern could cover any function of this server. */
function coversServer(patterns: readonly string[], server: string): boolean {
  return patterns.some((p) => p === '*' || p.startsWith(`${server}.`));
}

export async function harnessTools(
  scope: ListingScope,
  deps: { config: LoadedConfig; pool: ServerPool; gate: PolicyGate; logger: Logger },
): Promise<ServedTool[]> {
  const policy = await deps.gate.read(scope.tenant, 0, true);
  const servers = Object.keys(deps.config.servers).filter((s) => coversServer(scope.patterns, s));
  const listed = await Promise.all(
    servers.map(async (server) => {
      let lease;
      try {
        lease = await deps.pool.acquire(server, scope.jobId);
        const remote = lease.connection.kind === 'remote';
        const tools = await lease.connection.listTools(remote);
        const listing = remote || policy.state.approvals[server] ? listingDigest(tools) : undefined;
        return tools
          .map(({ execution: _tasks, ...tool }) => ({ ...tool, name: `${server}.${tool.name}` }))
          .filter(
            (tool) =>
              matchesAny(scope.patterns, tool.name) && verdict({ ...policy, tool: tool.name, remote, listing }).allowed,
          );
      } catch (err) {
        // A server that cannot be listed now shows no tools; the harness hears of them when it comes back.
        deps.logger.warn({ server, err: (err as Error).message }, 'gateway: could not list a server');
        return [];
      } finally {
        lease?.release();
      }
    }),
  );
  // The same JSON as the server listed it: the client's Tool type and the server's differ only in how strictly they
  // type a schema's values.
  return listed.flat() as ServedTool[];
}

/** What a harness sees of a listing, to tell whether it changed (and send `notifications/tools/list_changed`). */
export function toolsDigest(tools: Array<Pick<Tool, 'name'>>): string {
  return canonicalize(tools.map((t) => t.name).sort());
}
