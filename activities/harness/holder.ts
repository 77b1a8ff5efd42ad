/**
 * The gateway's bookkeeping of one harness run (H3, H4): the run its token lets in, the MCP endpoint it is served on,
 * what it was last listed, and what it has said. Tokens are kept by their hash ({@link tokenId}).
 */
import { createHash } from 'node:crypto';
import type { McpHttpEndpoint } from '../../mcp/http-server';
import { currentContext } from '../observe/gateway';
import { listedTools, toolOfName } from './tools';

/** A harness run this node serves, as its token says. */
export interface HarnessEntry {
  jobId: string;
  tenant: string;
  session: string;
  sessionRun: number;
  harness: string;
  patterns: readonly string[];
  /** I14: an external session's agent, come with its session token: it may close its session (CLOSE_TOOL). */
  external?: boolean;
}

/** One token's run, its MCP endpoint (both revisions) and what it last listed. */
export class Holder {
  closed = false;
  listed?: string;
  /**
   * The tools it was last listed, model name → `<server>.<function>` (H3): a call by a model name of the second form
   * is found here, and a call's `tool` label names one of them or says unknown (bounded, O1).
   */
  private tools = new Map<string, string>();
  private toolNames = new Set<string>();
  /** Its listing was read once already for a call it made without listing the tool. */
  readOnce = false;
  /** The id of its token in the gateway's map. */
  tokenId?: string;
  /** O2: the session's trace context, for the calls of a harness that sends no traceparent of its own. */
  readonly trace = currentContext();
  /** I14: when an external session's holder last found its session still open. */
  checkedAt = Date.now();
  /** The MCP revisions its harness has spoken, said once each in the node's log. */
  readonly spoken = new Set<string>();

  constructor(
    readonly entry: HarnessEntry,
    readonly endpoint: (holder: Holder) => McpHttpEndpoint,
  ) {}

  private made?: McpHttpEndpoint;

  remember(tools: Parameters<typeof listedTools>[0]): void {
    this.tools = listedTools(tools);
    this.toolNames = new Set(this.tools.values());
  }

  /** H3: the tool a call names, by its model name or `<server>.<function>`, if it is either. */
  toolOf(name: string): string | undefined {
    return toolOfName(name, this.tools);
  }

  /** Whether its last listing holds this tool (`<server>.<function>`). */
  lists(tool: string): boolean {
    return this.toolNames.has(tool);
  }

  get mcp(): McpHttpEndpoint {
    this.made ??= this.endpoint(this);
    return this.made;
  }

  close(): Promise<void> {
    return this.made?.close() ?? Promise.resolve();
  }
}

/** Tokens are looked up by their hash: a map keyed by the token itself would time its lookups by the token. */
export function tokenId(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}
