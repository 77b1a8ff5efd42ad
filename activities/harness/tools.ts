/**
 * H3: the tools a harness sees on its gateway — those of its patterns that the tenant's policy lets it call now,
 * with the hints, `_meta`, input and output schemas its server lists; a remote server's only once its listing is
 * approved (A2). Each is listed under the name a model takes (`ledger__set_status`, model/model-names.ts), with its
 * `<server>.<function>` in `_meta["oz0/tool"]`; a call by either name is taken ({@link toolOfName}). Read from the
 * node's own connections and its live policy copy. A function that runs as an MCP task is listed without its
 * `execution`: oz0 makes and follows the task itself, and to the harness it is an ordinary call that answers when the
 * task ends.
 */
import type { Tool } from '@modelcontextprotocol/client';
import type { Tool as ServedTool } from '@modelcontextprotocol/server';
import { canonicalize } from 'json-canonicalize';
import type { LoadedConfig } from '../../common/config';
import type { Logger } from '../../common/logger';
import { TOOL_META } from '../../model/protocol';
import { matchesAny, toolProblem } from '../../model/checks';
import { modelToolName, toolOfModelName } from '../../model/model-names';
import { listingDigest, verdict } from '../../model/policy-rules';
import type { PolicyGate } from '../policy/gate';
import type { ServerPool } from '../pool';

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
        // R1: a server the tenant has no credentials for lists nothing to its harness.
        if (deps.pool.credentials.missing(server, scope.tenant)) return [];
        lease = await deps.pool.acquire(server, { tenant: scope.tenant, jobId: scope.jobId });
        const remote = lease.connection.kind === 'remote';
        const tools = await lease.connection.listTools(remote);
        const listing = remote || policy.state.approvals[server] ? listingDigest(tools) : undefined;
        return tools
          .map(({ execution: _tasks, ...tool }) => ({ ...tool, name: `${server}.${tool.name}` }))
          .filter((tool) => {
            // A function whose name oz0 cannot call (SPEC's `<server>.<function>`) is not offered to the harness.
            if (toolProblem(tool.name)) {
              deps.logger.debug({ server, tool: tool.name }, 'gateway: a function with a name oz0 cannot call');
              return false;
            }
            return (
              matchesAny(scope.patterns, tool.name) && verdict({ ...policy, tool: tool.name, remote, listing }).allowed
            );
          });
      } catch (err) {
        // A server that cannot be listed now shows no tools; the harness hears of them when it comes back.
        deps.logger.warn({ server, err: (err as Error).message }, 'gateway: could not list a server');
        return [];
      } finally {
        lease?.release();
      }
    }),
  );
  const byName = new Map<string, string[]>();
  for (const tool of listed.flat()) {
    const name = modelToolName(tool.name);
    byName.set(name, [...(byName.get(name) ?? []), tool.name]);
  }
  // Two tools under one model name would take each other's calls: neither is listed. Only SHA-256 agreeing in 64 bits
  // over two tools' names does it (a server that lists such a name on purpose hides two tools, never takes a call).
  for (const [name, tools] of byName) {
    if (tools.length > 1) deps.logger.warn({ name, tools }, 'gateway: two tools share a model name: neither is listed');
  }
  // The same JSON as the server listed it: the client's Tool type and the server's differ only in how strictly they
  // type a schema's values.
  return listed
    .flat()
    .filter((tool) => byName.get(modelToolName(tool.name))?.length === 1)
    .map((tool) => ({
      ...tool,
      name: modelToolName(tool.name),
      _meta: { ...tool._meta, [TOOL_META]: tool.name },
    })) as ServedTool[];
}

/**
 * H3: the tool a harness's call names — `<server>.<function>` as it is, or its model name: one of the first form read
 * back, one of the second looked up among the tools it was listed (model name → tool); undefined when it is neither.
 */
export function toolOfName(name: string, listed: ReadonlyMap<string, string>): string | undefined {
  if (name.includes('.')) return name;
  return toolOfModelName(name) ?? listed.get(name);
}

/** The model name → tool of a listing, to take calls by either name ({@link toolOfName}). */
export function listedTools(tools: ReadonlyArray<Pick<ServedTool, 'name' | '_meta'>>): Map<string, string> {
  return new Map(tools.map((t) => [t.name, String(t._meta?.[TOOL_META])]));
}

/** What a harness sees of a listing, to tell whether it changed (and send `notifications/tools/list_changed`). */
export function toolsDigest(tools: Array<Pick<Tool, 'name'>>): string {
  return canonicalize(tools.map((t) => t.name).sort());
}
