/**
 * `oz0 policy approve`: read a server's listing as the node would, show it with its digest, and approve exactly
 * that listing (A2). A listing that changes later needs a new approval.
 */
import os from 'node:os';
import path from 'node:path';
import type { Tool } from '@modelcontextprotocol/client';
import { ServerPool } from '../activities/pool';
import type { LoadedConfig } from '../common/config';
import type { Logger } from '../common/logger';
import { listingDigest } from '../model/policy-rules';
import { approveUpdate } from '../model/messages';
import { changePolicy } from '../common/policy-client';
import type { PolicyTarget } from '../common/policy-client';
import type { Approval, TenantState } from '../model/schemas';

export interface Listing {
  server: string;
  tools: Tool[];
  digest: string;
  toolDigests: Approval['tools'];
}

/**
 * Reads a server's current listing through a short-lived pool of its own; a per-tenant server's with the tenant's
 * own credentials (R1): the listing that tenant's calls will see.
 */
export async function readListing(
  config: LoadedConfig,
  logger: Logger,
  server: string,
  tenant?: string,
): Promise<Listing> {
  if (!config.servers[server]) throw new Error(`the config has no server named "${server}"`);
  const pool = new ServerPool({
    config,
    logger,
    sandboxRoot: path.join(os.tmpdir(), `oz0-approve-${process.pid}`),
    // The operator's own tool: a server that fails to list its tools says why.
    quoteSharedStderr: true,
  });
  try {
    const lease = await pool.acquire(server, { tenant: tenant ?? 'oz0', jobId: 'oz0-approve' });
    try {
      const tools = await lease.connection.listTools(true);
      const { digest, tools: toolDigests } = listingDigest(tools);
      return { server, tools, digest, toolDigests };
    } finally {
      lease.release();
    }
  } finally {
    await pool.close();
  }
}

/** Approves exactly this listing for the tenant. */
export function approveListing(target: PolicyTarget, tenant: string, listing: Listing): Promise<TenantState> {
  const approval: Approval = {
    digest: listing.digest,
    tools: listing.toolDigests,
    approvedAt: new Date().toISOString(),
  };
  return changePolicy(target, tenant, approveUpdate, [listing.server, approval]);
}

/** The listing as a person reads it before approving: names, descriptions, hints, _meta, and the digest. */
export function formatListing(listing: Listing): string {
  const lines = [`${listing.server}: ${listing.tools.length} tools, listing digest ${listing.digest}`];
  for (const tool of listing.tools) {
    lines.push(`- ${tool.name}${tool.description ? `: ${tool.description}` : ''}`);
    if (tool.annotations && Object.keys(tool.annotations).length)
      lines.push(`    hints: ${JSON.stringify(tool.annotations)}`);
    if (tool._meta && Object.keys(tool._meta).length) lines.push(`    _meta: ${JSON.stringify(tool._meta)}`);
  }
  return lines.join('\n');
}
