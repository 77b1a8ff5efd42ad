/**
 * oz0's MCP client offers no sampling, elicitation or roots: it has no model to sample, no person to ask, no files to
 * show. A server may list some functions only to clients that offer them (the reference server does), so those are
 * missing from the listing oz0 gets. This finds which, by listing once more as a client that offers each in turn.
 */
import type { ClientCapabilities, Tool } from '@modelcontextprotocol/client';

/** The client capabilities a server may list functions for, as MCP names them. */
export const OFFERED_BY_OTHERS = ['sampling', 'elicitation', 'roots'] as const;
export type ClientCapability = (typeof OFFERED_BY_OTHERS)[number];

/**
 * Where a listing for a client that offers other capabilities comes from: the node's pool (`ServerPool.listingFor`),
 * a per-tenant server's with the tenant's own credentials (R1).
 */
export interface Listings {
  listingFor(server: string, capabilities: ClientCapabilities, tenant?: string): Promise<Tool[]>;
}

/**
 * The functions `server` lists only to a client that offers a capability oz0 does not, each with those capabilities.
 * `listed` is the listing oz0 got. A probe that fails (the server refuses the capability, or dies) counts as none.
 */
export async function hiddenFunctions(
  pool: Listings,
  server: string,
  listed: ReadonlyArray<{ name: string }>,
  /** Whose credentials open a per-tenant server (R1). */
  tenant?: string,
): Promise<Map<string, ClientCapability[]>> {
  const known = new Set(listed.map((t) => t.name));
  const hidden = new Map<string, ClientCapability[]>();
  const probes = await Promise.all(
    OFFERED_BY_OTHERS.map(async (capability) => {
      const capabilities: ClientCapabilities = { [capability]: {} };
      const tools = await pool.listingFor(server, capabilities, tenant).catch(() => []);
      return { capability, tools };
    }),
  );
  for (const { capability, tools } of probes) {
    for (const tool of tools) {
      if (known.has(tool.name)) continue;
      hidden.set(tool.name, [...(hidden.get(tool.name) ?? []), capability]);
    }
  }
  return hidden;
}

/** Why a function is missing from the listing, in the trace's words. */
export function hiddenWhy(needs: readonly ClientCapability[]): string {
  return `the server lists it only to clients that offer ${needs.join(' or ')}; oz0 does not`;
}
