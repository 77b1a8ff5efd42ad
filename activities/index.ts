/**
 * The node's activities, built from their dependencies so tests hand in real servers. Workflows type against the
 * `Activities` interface in model/activities.ts, which `createActivities` implements.
 */
import { toolSettings } from '../common/config';
import type { LoadedConfig } from '../common/config';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { FEATURE_LEVEL, toolsOf } from '../model/job';
import type {
  Activities,
  CallAsks,
  CallInput,
  CallOutput,
  CallWaits,
  HarnessInput,
  HarnessOutcome,
  JobSettings,
  SessionPlan,
} from '../model/activities';
import { JobSpecError, parseJobSpec, reservedIdProblem } from '../model/schemas';
import { priorityProblem } from '../model/shares';
import type { Priority } from '@temporalio/common';
import { sharesOf } from '../model/policy-rules';
import { sharesSeedOf } from '../common/config';
import { listingDigest } from '../model/policy-rules';
import { splitTool } from '../model/checks';
import { mayBeMadeAgain } from './call/verdicts';
import { callToolAttempt } from './call/attempt';
import { completeDurably } from './call/durable';
import type { Client } from '@temporalio/client';
import { handedOn, runHarness } from './harness/run';
import { Pulse } from './heartbeats';
import type { HarnessDeps } from './harness/run';
import type { CallDeps } from './call/deps';
import type { JobSpec } from '../model/schemas';
import type { ApprovalNotice } from '../model/activities';
import { sendNotice } from './notices';
import { setFairnessKey } from './fairness-key';
import type { PayloadOwners } from '../data';

export interface ActivityDeps extends CallDeps {
  config: LoadedConfig;
  /** Temporal, for a live session's call that completes itself (H4, ./call/durable.ts). */
  client: Client;
  /** H2-H7: the node's gateway and where its harness runs keep their folders. */
  harness: Omit<HarnessDeps, 'config' | 'logger' | 'route'>;
  /** D2: whose each job is, so the payload store files its payloads under its tenant. */
  owners: PayloadOwners;
}

/**
 * N5: the sessions a node holds (their leases and harnesses, on its session queue), and the ones it said yes to that
 * have not come for their lease yet (a session's lease is picked up within seconds of its opening, or never).
 */
export class SessionCount {
  open = 0;
  private promised: number[] = [];

  constructor(readonly max: number) {}

  /** A session asks to open here: refused (why) when the node holds its most, counting those on their way. */
  admit(now = Date.now()): string | undefined {
    this.promised = this.promised.filter((t) => now - t < PROMISE_MS);
    if (this.open + this.promised.length >= this.max)
      return `it holds its most sessions (node.maxSessions: ${this.max}, ${this.open} open)`;
    this.promised.push(now);
    return undefined;
  }

  /** A session's lease (or harness) runs here now; call the result when it ends. */
  hold(): () => void {
    this.promised.shift();
    this.open++;
    return () => void this.open--;
  }
}

/** A session said yes to comes for its lease within this long (workflows/session.ts leasePickupSeconds, at least). */
const PROMISE_MS = 15_000;

export function createActivities(deps: ActivityDeps): Activities {
  const sessions = new SessionCount(deps.config.node.maxSessions);
  return {
    /**
     * One attempt of one call (T1); or, for a call that waits for a person's yes, the question (A4); or, for one that
     * may not go on now, what it waits for (F2, F3).
     */
    async callTool(input: CallInput): Promise<CallOutput | CallAsks | CallWaits> {
      deps.owners.learn(input.jobId, input.tenant);
      // H4: a live session's answer goes to Temporal from here, then at once to its caller (./call/durable.ts).
      return completeDurably(deps, input, await callToolAttempt(deps, input));
    },

    /**
     * Checks a job's input against the spec's schema (here, not in the workflow: zod stays out of the bundle) and
     * resolves the settings of the tools it names from this node's config (time limits, attempts, continue-as-new); a bad spec comes back as why, naming the field.
     */
    async resolveJobSettings(input: unknown, priority?: Priority): Promise<JobSettings | { badSpec: string }> {
      // I11: a job under one of the platform's ids (started by a client that did not check) ends at once, freeing it.
      const run = Context.current().info.workflowExecution;
      const reserved = reservedIdProblem(run?.workflowId ?? '');
      if (reserved) return { badSpec: `bad job id: ${reserved}` };
      let spec: JobSpec;
      try {
        // H1: a spec naming a harness this node's config does not have is refused, naming the field.
        spec = parseJobSpec(input, { harnesses: Object.keys(deps.config.harnesses) });
      } catch (err) {
        if (err instanceof JobSpecError) return { badSpec: err.message };
        throw err;
      }
      // F4: a priority ahead of what its tenant may ask is refused, naming the field.
      if (spec.priority !== undefined) {
        const { state } = await deps.gate.read(spec.tenant, deps.policyMaxAgeMs, true);
        const { maxPriority } = sharesOf(state, sharesSeedOf(deps.config, spec.tenant));
        const problem = priorityProblem(spec.priority, maxPriority);
        if (problem) return { badSpec: `bad job spec: priority: ${problem}` };
      }
      // F1: a job started without its tenant as its fairness key gets it now (./fairness-key.ts), beside the job.
      if (priority && priority.fairnessKey !== spec.tenant && run && deps.client) {
        void setFairnessKey({ client: deps.client, logger: deps.logger }, run, spec);
      }
      deps.owners.learn(run?.workflowId ?? '', spec.tenant);
      const tools = toolsOf(spec);
      const harnesses = spec.steps.flatMap((s) =>
        'session' in s && !Array.isArray(s.session) && 'harness' in s.session ? [s.session.harness] : [],
      );
      return {
        tools: Object.fromEntries(tools.map((tool) => [tool, toolSettings(deps.config, tool)])),
        continueAsNewAfterCalls: deps.config.jobs.continueAsNewAfterCalls,
        maxCallsPerSession: deps.config.jobs.maxCallsPerSession,
        heartbeatTimeoutSeconds: deps.config.node.heartbeatTimeoutSeconds,
        harnesses: Object.fromEntries(
          harnesses.map((name) => {
            const { timeoutSeconds, tools: patterns } = deps.config.harnesses[name];
            return [name, { timeoutSeconds, tools: patterns }];
          }),
        ),
        // N6: the run writes this release's markers, unless a rollback to the previous release must stay possible.
        level: deps.config.upgrade.rollbackSafe ? 0 : FEATURE_LEVEL,
      };
    },

    /**
     * Opens a session on this node (T4), or describes a live session's new tool: which tools say idempotentHint
     * (their keys, K3/K5), which may be made again (whether a lost session may start afresh), their settings, and
     * this node's own queue, where the session's calls then run. A tool it cannot describe is left out.
     */
    async describeTools(jobId: string, tenant: string, tools: string[], opening = false): Promise<SessionPlan> {
      // N5: a node that holds its most sessions says so as the session comes in; Temporal tries another node.
      const full = opening ? sessions.admit() : undefined;
      if (full)
        throw ApplicationFailure.retryable(`node ${deps.node.id} takes no more sessions: ${full}`, 'SessionsFull');
      const idempotent: Record<string, boolean> = {};
      const mayRetry: Record<string, boolean> = {};
      const settings = Object.fromEntries(tools.map((tool) => [tool, toolSettings(deps.config, tool)]));
      for (const tool of tools) {
        const { server, fn } = splitTool(tool);
        if (!deps.pool.serverConfig(server)) continue;
        if (deps.pool.credentials.missing(server, tenant)) continue;
        const lease = await deps.pool.acquire(server, { tenant, jobId });
        try {
          const remote = lease.connection.kind === 'remote';
          const listing = await lease.connection.listTools(remote);
          const listed = listing.find((t) => t.name === fn);
          if (!listed) continue;
          idempotent[tool] = listed.annotations?.idempotentHint === true;
          let approved = false;
          if (remote) {
            const { state } = await deps.gate.read(tenant, 0);
            approved = state.approvals[server]?.digest === listingDigest(listing).digest;
          }
          mayRetry[tool] = mayBeMadeAgain(listed, lease.connection.kind, approved);
        } finally {
          lease.release();
        }
      }
      return { idempotent, mayRetry, settings, node: deps.node };
    },

    /**
     * Holds a session's place on this node: it heartbeats until cancelled, so when the node dies its heartbeat
     * stops and the job learns within the heartbeat timeout that the session was lost (T4). A node shutting down
     * ends it as a shutdown once its calls have ended (issue 56.4): the job hands the session on at once.
     */
    async holdSession(): Promise<void> {
      const ctx = Context.current();
      const pulse = new Pulse(ctx, deps.route.pace(ctx.info.heartbeatTimeoutMs));
      const release = sessions.hold();
      const handOver = deps.harness.handOver;
      let onHandOver: (() => void) | undefined;
      try {
        ctx.heartbeat();
        await Promise.race([
          ctx.cancelled,
          new Promise<never>((_, reject) => {
            onHandOver = () => reject(handedOn(deps.node.id));
            if (handOver?.aborted) onHandOver();
            else handOver?.addEventListener('abort', onHandOver, { once: true });
          }),
        ]);
      } finally {
        if (onHandOver) handOver?.removeEventListener('abort', onHandOver);
        release();
        pulse.stop();
      }
    },

    /** H2, H7: runs a harness on this node until it exits; its heartbeat is the session's lease. */
    async runHarness(input: HarnessInput): Promise<HarnessOutcome> {
      // O1: a live session on this node while its harness runs.
      const ended = deps.metrics?.sessionStarted();
      const release = sessions.hold();
      try {
        return await runHarness(
          { ...deps.harness, config: deps.config, logger: deps.logger, route: deps.route },
          input,
        );
      } finally {
        release();
        ended?.();
      }
    },

    /** H5: stops a live session's running call on this node with its caller's words; false when none runs here. */
    async stopCall(jobId: string, callId: string, why: string): Promise<boolean> {
      return deps.relay.stop(jobId, callId, why);
    },

    /**
     * The start probe's activity (worker/cancel-way.ts): it never heartbeats and waits for its cancel, so a cancel
     * that reaches it was pushed by the server.
     */
    async awaitPushedCancel(waitMs: number): Promise<void> {
      const ctx = Context.current();
      const probe = deps.route.probe;
      probe?.started();
      try {
        await ctx.sleep(waitMs);
      } catch (err) {
        if (ctx.cancellationDetails?.cancelRequested) probe?.heard();
        throw err;
      }
    },

    /** Stops a job's sandboxed servers on this node, with their process trees; run on the node's own queue. */
    async stopSandboxes(jobId: string, tenant: string): Promise<number> {
      return deps.pool.releaseJob({ tenant, jobId });
    },

    /** A10: the tenant's webhook told of a call's wait (./notices.ts). */
    async noticeApprovers(notice: ApprovalNotice): Promise<'sent' | 'none'> {
      return sendNotice(deps.config, notice);
    },
  };
}

export type { Activities };
export type { NodeIdentity } from './call/deps';
