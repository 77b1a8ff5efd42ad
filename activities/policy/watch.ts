/**
 * A node's live copy of one tenant's policy (or of the all-tenants kill switches): it follows the policy
 * workflow's history with a long poll, and reads each new state off the history itself — a run's input (the
 * seed, or the state a run before it carried over) and every update's result. A change reaches the node as the
 * update that made it returns to whoever made it, so a call can be checked without a read of its own (A3).
 *
 * The copy is trusted only while the watch has caught up with the history and is still following it; on any
 * error it is not, and the node reads the policy for every call until the watch has caught up again.
 */
import { WorkflowNotFoundError } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import type { temporal } from '@temporalio/proto';
import type { Logger } from '../../common/logger';
import { openedWith } from '../../data';
import { POLICY_WORKFLOW, emptyState, policyWorkflowId } from '../../model/policy-rules';
import { PolicyInputSchema, TenantStateSchema } from '../../model/schemas';
import type { TenantState } from '../../model/schemas';
import { policyStart } from '../../common/policy-client';
import type { PolicyTarget } from '../../common/policy-client';

type HistoryEvent = temporal.api.history.v1.IHistoryEvent;

/** Where the tenants' policy workflows are, and how one starts if this node is the first to need it. */
export type WatchTarget = PolicyTarget;

/** What one history event says about the policy: a new state, the next run, or the end of the workflow. */
export type PolicyEventEffect = { state: TenantState } | { continuedAs: string } | { closed: string } | undefined;

/** A policy workflow's history event, read for the policy it carries (pure; the payloads are checked). */
export function policyEventEffect(event: HistoryEvent): PolicyEventEffect {
  const started = event.workflowExecutionStartedEventAttributes;
  if (started) {
    const input = PolicyInputSchema.parse(payload(started.input?.payloads?.[0]));
    return { state: input.state ?? emptyState(input.seed, input.shares) };
  }
  const completed = event.workflowExecutionUpdateCompletedEventAttributes;
  if (completed) {
    // A refused update never reaches the history; an accepted one of ours always returns the whole state.
    const success = completed.outcome?.success?.payloads?.[0];
    return success ? { state: TenantStateSchema.parse(payload(success)) } : undefined;
  }
  const continued = event.workflowExecutionContinuedAsNewEventAttributes;
  if (continued) return { continuedAs: String(continued.newExecutionRunId) };
  if (event.workflowExecutionCompletedEventAttributes) return { closed: 'completed' };
  if (event.workflowExecutionFailedEventAttributes) return { closed: 'failed' };
  if (event.workflowExecutionTimedOutEventAttributes) return { closed: 'timed out' };
  if (event.workflowExecutionCanceledEventAttributes) return { closed: 'cancelled' };
  if (event.workflowExecutionTerminatedEventAttributes) return { closed: 'terminated' };
  return undefined;
}

function payload(p: temporal.api.common.v1.IPayload | undefined): unknown {
  if (!p) throw new Error('a policy event without its payload');
  return defaultPayloadConverter.fromPayload(p);
}

/** The server answers a long poll with nothing after about 20 s; past this, the connection is taken as lost. */
const LONG_POLL_DEADLINE_MS = 30_000;
const RETRY_MIN_MS = 250;
const RETRY_MAX_MS = 10_000;

export class PolicyWatch {
  private current?: TenantState;
  private live = false;
  /** How long to wait before following again after an error: doubles up to RETRY_MAX_MS, reset once caught up. */
  private backoff = RETRY_MIN_MS;
  private readonly stop = new AbortController();

  constructor(
    private readonly target: WatchTarget,
    readonly tenant: string,
    /** Called with every state the watch learns while it is caught up (and once when it catches up). */
    private readonly onState: (state: TenantState) => void,
    private readonly logger: Logger,
  ) {
    void this.run();
  }

  /** The tenant's state as of now, when the watch is caught up and following; else undefined. */
  get state(): TenantState | undefined {
    return this.live ? this.current : undefined;
  }

  close(): void {
    this.live = false;
    this.stop.abort();
  }

  private async run(): Promise<void> {
    while (!this.stop.signal.aborted) {
      try {
        await this.follow();
      } catch (err) {
        this.live = false;
        if (this.stop.signal.aborted) return;
        this.logger.debug({ tenant: this.tenant, err: (err as Error).message }, 'policy watch lost; reading per call');
        await new Promise((resolve) => setTimeout(resolve, this.backoff).unref());
        this.backoff = Math.min(this.backoff * 2, RETRY_MAX_MS);
      }
    }
  }

  /** Follows the workflow's runs until it closes (other than by continuing as new) or an RPC fails. */
  private async follow(): Promise<void> {
    let { runId, historyLength } = await this.currentRun();
    for (;;) {
      let token: Uint8Array | undefined;
      let next: string | undefined;
      while (!next) {
        const page = await this.poll(runId, token);
        token = page.nextPageToken ?? undefined;
        let changed = false;
        for (const event of page.history?.events ?? []) {
          const effect = policyEventEffect(await this.opened(event));
          if (!effect) continue;
          if ('closed' in effect) throw new Error(`policy workflow ${this.tenant} ${effect.closed}`);
          if ('continuedAs' in effect) next = effect.continuedAs;
          else {
            this.current = effect.state;
            changed = true;
          }
        }
        const last = Number(page.history?.events?.at(-1)?.eventId ?? 0);
        if (!this.live && last >= historyLength && this.current) {
          this.live = true;
          changed = true;
          this.backoff = RETRY_MIN_MS;
          this.logger.debug({ tenant: this.tenant, runId }, 'policy watch caught up');
        }
        if (changed && this.live) this.onState(this.current!);
        if (!next && (!token || token.length === 0)) throw new Error(`policy workflow ${this.tenant}: history ended`);
      }
      // The next run starts with the state this one carried over: a copy that was current stays current. One that
      // was still catching up catches up with the next run's history as it is now.
      runId = next;
      historyLength = this.live
        ? 0
        : (await this.target.client.workflow.getHandle(policyWorkflowId(this.tenant), runId).describe()).historyLength;
    }
  }

  /**
   * The running run and how long its history is now; the workflow is started (seeded) if it never was, or if what
   * stood under its id was not a policy and has ended (I11: a job that took the id, ended at its first task).
   */
  private async currentRun(): Promise<{ runId: string; historyLength: number }> {
    const { client } = this.target;
    const workflowId = policyWorkflowId(this.tenant);
    const describe = () => client.workflow.getHandle(workflowId).describe();
    let described = await describe().catch((err: unknown) => {
      if (err instanceof WorkflowNotFoundError) return undefined;
      throw err;
    });
    if (!described || (described.type !== POLICY_WORKFLOW && described.status.name !== 'RUNNING')) {
      // Nobody changed this tenant yet: start its workflow, seeded as `oz0 policy set` would have.
      await client.workflow.start(POLICY_WORKFLOW, policyStart(this.target, this.tenant));
      described = await describe();
    }
    // I11: only a tenant's policy workflow is read as its policy (a job under its id would set the tenant's rules).
    if (described.type !== POLICY_WORKFLOW)
      throw new Error(`${workflowId} is a ${described.type} workflow, not a tenant's policy: it is not read`);
    // A policy workflow that was ended by hand is not restarted here: its last state stays readable by query.
    if (described.status.name !== 'RUNNING')
      throw new Error(`policy workflow ${this.tenant} is ${described.status.name}`);
    return { runId: described.runId, historyLength: described.historyLength };
  }

  /** D4: an event's payloads as the workflow wrote them (sealed with the platform's key in history). */
  private async opened(event: HistoryEvent): Promise<HistoryEvent> {
    const { client } = this.target;
    const context = {
      type: 'workflow' as const,
      namespace: client.options.namespace,
      workflowId: policyWorkflowId(this.tenant),
    };
    const open = (payloads: temporal.api.common.v1.IPayload[] | null | undefined) =>
      payloads?.length ? openedWith(client.options.loadedDataConverter, payloads, context) : payloads;
    const started = event.workflowExecutionStartedEventAttributes;
    if (started) {
      return {
        ...event,
        workflowExecutionStartedEventAttributes: { input: { payloads: await open(started.input?.payloads) } },
      };
    }
    const completed = event.workflowExecutionUpdateCompletedEventAttributes;
    if (completed?.outcome?.success) {
      const success = { payloads: await open(completed.outcome.success.payloads) };
      return { ...event, workflowExecutionUpdateCompletedEventAttributes: { outcome: { success } } };
    }
    return event;
  }

  private poll(runId: string, nextPageToken: Uint8Array | undefined) {
    const { client } = this.target;
    return client.withAbortSignal(this.stop.signal, () =>
      client.withDeadline(Date.now() + LONG_POLL_DEADLINE_MS, () =>
        client.workflowService.getWorkflowExecutionHistory({
          namespace: client.options.namespace,
          execution: { workflowId: policyWorkflowId(this.tenant), runId },
          nextPageToken,
          waitNewEvent: true,
          maximumPageSize: 1000,
        }),
      ),
    );
  }
}
