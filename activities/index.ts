/**
 * The node's activities, built from their dependencies so tests hand in real servers. Workflows type
 * against `Activities` (`import type` only).
 */
import { toolSettings } from '../worker/config';
import type { LoadedConfig } from '../worker/config';
import type { CallInput, CallOutput, JobSettings } from '../workflows/definitions';
import { callToolAttempt } from './call-tool';
import type { CallDeps } from './call-tool';

export interface ActivityDeps extends CallDeps {
  config: LoadedConfig;
}

export function createActivities(deps: ActivityDeps) {
  return {
    /** One attempt of one call (T1). */
    async callTool(input: CallInput): Promise<CallOutput> {
      return callToolAttempt(deps, input);
    },

    /** The node's settings for the tools a job names: time limits, attempts, continue-as-new. */
    async resolveJobSettings(tools: string[]): Promise<JobSettings> {
      return {
        tools: Object.fromEntries(tools.map((tool) => [tool, toolSettings(deps.config, tool)])),
        continueAsNewAfterCalls: deps.config.jobs.continueAsNewAfterCalls,
        heartbeatTimeoutSeconds: deps.config.node.heartbeatTimeoutSeconds,
      };
    },

    /**
     * Which of these tools say idempotentHint in their server's listing, so the workflow can pick their keys
     * (K3/K5). A tool it cannot describe is left out.
     */
    async describeTools(
      jobId: string,
      tools: string[],
    ): Promise<{ idempotent: Record<string, boolean>; sandboxQueue?: string }> {
      const idempotent: Record<string, boolean> = {};
      let sandbox = false;
      for (const tool of tools) {
        const dot = tool.indexOf('.');
        const server = tool.slice(0, dot);
        if (!deps.pool.serverConfig(server)) continue;
        const lease = await deps.pool.acquire(server, jobId);
        try {
          sandbox ||= lease.connection.kind === 'sandbox';
          const listed = (await lease.connection.listTools()).find((t) => t.name === tool.slice(dot + 1));
          if (listed) idempotent[tool] = listed.annotations?.idempotentHint === true;
        } finally {
          lease.release();
        }
      }
      return sandbox ? { idempotent, sandboxQueue: deps.node.queue } : { idempotent };
    },

    /** Stops a job's sandboxed servers on this node, with their process trees; run on the node's own queue. */
    async stopSandboxes(jobId: string): Promise<number> {
      return deps.pool.releaseJob(jobId);
    },
  };
}

export type Activities = ReturnType<typeof createActivities>;
export type { NodeIdentity } from './call-tool';
