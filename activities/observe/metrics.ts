/**
 * O1: a node's Prometheus series, by prom-client. Every call, attempt and outcome by `tool` (`server.function`),
 * `server`, `tenant` and `outcome` (the trace's words); attempt time and cancel → stopped time as histograms; busy
 * waits, policy refusals and kill switches; running calls and free slots; sandboxes; live sessions and gateway calls.
 *
 * Label values are bounded: a tool is named only once its server listed it (else `<server>.(unknown)`, or `(unknown)`
 * for a server the node has not), and never is a job id, a key or an argument a label.
 *
 * Each series carries the node's `release` and `build_id` (issue 56, common/release.ts), and `oz0_build_info` says them
 * beside the node's name.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { Outcome } from '../../model/schemas';
import { releaseLabels } from '../../common/release';
import type { NodeRelease } from '../../common/release';

/** Seconds: an attempt runs from milliseconds (a local read) to the tool's time limit (minutes). */
const ATTEMPT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];
/** Seconds from a stop (cancel, kill switch, time limit) to the attempt's end: C1 wants well under a few seconds. */
const STOP_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30];
/** Seconds a busy server asked oz0 to wait (B2: up to a minute). */
const WAIT_BUCKETS = [0.1, 0.5, 1, 2, 5, 10, 20, 30, 60];
/** Seconds from a call's activity scheduled to a node starting it: F1 wants another tenant's call under 2 s. */
const DISPATCH_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300];

/** F5: what a node counts of each tenant's calls now: running on it, and waiting in line (as its limiter last said). */
export interface TenantCounts {
  running: Map<string, number>;
  waiting: Map<string, number>;
}

export const UNKNOWN = '(unknown)';

/** The `tool` and `server` labels of a call: named as its server lists it, or said unknown (bounded). */
export function callLabels(tool: string, known: { server: boolean; fn: boolean }): { tool: string; server: string } {
  const dot = tool.indexOf('.');
  const server = dot > 0 ? tool.slice(0, dot) : tool;
  if (!known.server) return { tool: UNKNOWN, server: UNKNOWN };
  return { tool: known.fn ? tool : `${server}.${UNKNOWN}`, server };
}

/** What one attempt was, for the series; said once, when it ends. */
export interface AttemptEnd {
  tool: string;
  server: string;
  tenant: string;
  outcome: Outcome;
  seconds: number;
  /** No attempt follows: the call ended with this one. */
  final: boolean;
  /** A stop (cancel, kill switch, time limit, node shutdown) came this many seconds before the end. */
  stoppedAfter?: number;
}

export class NodeMetrics {
  readonly registry = new Registry();
  private readonly calls: Counter<'tool' | 'server' | 'tenant' | 'outcome'>;
  private readonly attempts: Counter<'tool' | 'server' | 'tenant' | 'outcome'>;
  private readonly attemptSeconds: Histogram<'tool' | 'outcome'>;
  private readonly mcpSeconds: Histogram<'mcp_method_name' | 'gen_ai_tool_name' | 'error_type' | 'network_transport'>;
  private readonly cancelSeconds: Histogram<'tool' | 'cause'>;
  private readonly busyWaits: Counter<'tool' | 'server' | 'tenant'>;
  private readonly busyWaitSeconds: Histogram<'tool'>;
  private readonly refusals: Counter<'tool' | 'server' | 'tenant'>;
  private readonly killSwitchStops: Counter<'tool' | 'tenant'>;
  private readonly sandboxesStarted: Counter<'kind' | 'name'>;
  private readonly sandboxesStopped: Counter<'kind' | 'name' | 'reason'>;
  private readonly gatewayCalls: Counter<'tool' | 'tenant' | 'outcome'>;
  private readonly dispatchSeconds: Histogram<'tenant'>;
  private readonly waits: Counter<'tenant' | 'for'>;
  private tenantCounts?: () => TenantCounts;
  private running = 0;
  private sandboxes = 0;
  private sessions = 0;

  /** `node`: what the series say of the node itself (issue 56); absent in unit tests of the series alone. */
  constructor(slots: number, node?: { node: string; release: NodeRelease }) {
    const registers = [this.registry];
    // Issue 56: every series says which release and build made it (the Temporal runtime's too: worker/telemetry.ts).
    if (node) this.registry.setDefaultLabels(releaseLabels(node.release));
    collectDefaultMetrics({ register: this.registry });
    // Gauges whose names end in _total, which Prometheus' own lint (promtool check metrics) refuses.
    for (const name of ['nodejs_active_handles_total', 'nodejs_active_requests_total', 'nodejs_active_resources_total'])
      this.registry.removeSingleMetric(name);
    const counter = <L extends string>(name: string, help: string, labelNames: readonly L[]) =>
      new Counter<L>({ name, help, labelNames, registers });
    const histogram = <L extends string>(name: string, help: string, labelNames: readonly L[], buckets: number[]) =>
      new Histogram<L>({ name, help, labelNames, buckets, registers });
    const labels = ['tool', 'server', 'tenant', 'outcome'] as const;
    this.calls = counter(
      'oz0_calls_total',
      "Calls ended on this node, by their last attempt's outcome (the trace's words)",
      labels,
    );
    this.attempts = counter('oz0_attempts_total', 'Attempts ended on this node, by outcome', labels);
    this.attemptSeconds = histogram(
      'oz0_attempt_duration_seconds',
      'How long an attempt took, from its slot to its end',
      ['tool', 'outcome'],
      ATTEMPT_BUCKETS,
    );
    this.mcpSeconds = histogram(
      'mcp_client_operation_duration_seconds',
      "MCP requests oz0 sent, from request to answer (OpenTelemetry's mcp.client.operation.duration)",
      ['mcp_method_name', 'gen_ai_tool_name', 'error_type', 'network_transport'],
      ATTEMPT_BUCKETS,
    );
    this.cancelSeconds = histogram(
      'oz0_cancel_to_stopped_seconds',
      'From a stop (job cancel, kill switch, time limit, node shutdown) to the attempt having stopped',
      ['tool', 'cause'],
      STOP_BUCKETS,
    );
    this.busyWaits = counter(
      'oz0_busy_waits_total',
      'Times a busy server made a call wait before its next attempt (B2)',
      ['tool', 'server', 'tenant'],
    );
    this.busyWaitSeconds = histogram(
      'oz0_busy_wait_seconds',
      'How long a busy server made a call wait before its next attempt',
      ['tool'],
      WAIT_BUCKETS,
    );
    this.refusals = counter('oz0_policy_refusals_total', "Attempts the tenant's policy refused (A1-A3)", [
      'tool',
      'server',
      'tenant',
    ]);
    this.killSwitchStops = counter('oz0_kill_switch_stops_total', 'Attempts a kill switch stopped (C5)', [
      'tool',
      'tenant',
    ]);
    // A gauge's collect() runs with the gauge as `this`: the node's counts are read through these.
    const running = () => this.running;
    const sandboxes = () => this.sandboxes;
    const sessions = () => this.sessions;
    new Gauge({
      name: 'oz0_calls_running',
      help: "Calls' attempts running on this node now",
      registers,
      collect() {
        this.set(running());
      },
    });
    new Gauge({ name: 'oz0_slots', help: 'Calls this node runs at once (node.slots)', registers }).set(slots);
    // Prometheus' usual info series: 1, its labels what the node is, for joins by node name.
    if (node)
      new Gauge({
        name: 'oz0_build_info',
        help: "The node's release and build id (issue 56): always 1",
        labelNames: ['node', 'version', 'commit'],
        registers,
      }).set({ node: node.node, version: node.release.version, commit: node.release.commit ?? 'unknown' }, 1);
    new Gauge({
      name: 'oz0_slots_free',
      help: 'Slots with no call running on this node now',
      registers,
      collect() {
        this.set(Math.max(0, slots - running()));
      },
    });
    this.sandboxesStarted = counter(
      'oz0_sandboxes_started_total',
      'Sandboxes started: sandboxed servers and harnesses (I1)',
      ['kind', 'name'],
    );
    this.sandboxesStopped = counter(
      'oz0_sandboxes_stopped_total',
      'Sandboxes stopped, by why: exit, or limit (past one of its limits, I4)',
      ['kind', 'name', 'reason'],
    );
    new Gauge({
      name: 'oz0_sandboxes_running',
      help: 'Sandboxes running on this node now',
      registers,
      collect() {
        this.set(sandboxes());
      },
    });
    new Gauge({
      name: 'oz0_sessions_live',
      help: 'Harness sessions running on this node now (H2)',
      registers,
      collect() {
        this.set(sessions());
      },
    });
    this.gatewayCalls = counter(
      'oz0_gateway_calls_total',
      "Harnesses' tools/call requests through this node's gateway, by how they ended (H3)",
      ['tool', 'tenant', 'outcome'],
    );
    this.dispatchSeconds = histogram(
      'oz0_call_schedule_to_start_seconds',
      "From a call's attempt scheduled to a node starting it: its wait in Temporal's queue (F1)",
      ['tenant'],
      DISPATCH_BUCKETS,
    );
    this.waits = counter(
      'oz0_call_waits_total',
      "Times a call gave its slot back to wait: for its turn under its tenant's cap or rate (turn), or for a slot its share allows (slot)",
      ['tenant', 'for'],
    );
    const counts = () => this.tenantCounts?.();
    new Gauge({
      name: 'oz0_tenant_calls_running',
      help: "Each tenant's calls running on this node now (F5)",
      labelNames: ['tenant'],
      registers,
      collect() {
        this.reset();
        for (const [tenant, n] of counts()?.running ?? []) this.set({ tenant }, n);
      },
    });
    new Gauge({
      name: 'oz0_tenant_calls_waiting',
      help: "Calls waiting in line under each tenant's caps and rates, as its limiter last told this node (F5)",
      labelNames: ['tenant'],
      registers,
      collect() {
        this.reset();
        for (const [tenant, n] of counts()?.waiting ?? []) this.set({ tenant }, n);
      },
    });
  }

  /** F5: where the node's counts by tenant come from (its share gate). */
  countTenants(fn: () => TenantCounts): void {
    this.tenantCounts = fn;
  }

  /** F1: a call's attempt waited this long in Temporal's queue before a node started it. */
  attemptDispatched(tenant: string, seconds: number): void {
    this.dispatchSeconds.observe({ tenant }, Math.max(0, seconds));
  }

  /** F2, F3: a call gave its slot back to wait. */
  callWaited(tenant: string, kind: 'turn' | 'slot'): void {
    this.waits.inc({ tenant, for: kind });
  }

  /** An attempt took a slot; the returned function gives it back. */
  attemptStarted(): () => void {
    this.running++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.running--;
    };
  }

  attemptEnded(end: AttemptEnd): void {
    const { tool, server, tenant, outcome } = end;
    this.attempts.inc({ tool, server, tenant, outcome });
    this.attemptSeconds.observe({ tool, outcome }, end.seconds);
    if (end.final) this.calls.inc({ tool, server, tenant, outcome });
    if (outcome === 'refused') this.refusals.inc({ tool, server, tenant });
    if (outcome === 'killed') this.killSwitchStops.inc({ tool, tenant });
    if (end.stoppedAfter !== undefined) this.cancelSeconds.observe({ tool, cause: outcome }, end.stoppedAfter);
  }

  busyWait(labels: { tool: string; server: string; tenant: string }, seconds: number | undefined): void {
    this.busyWaits.inc(labels);
    if (seconds !== undefined) this.busyWaitSeconds.observe({ tool: labels.tool }, seconds);
  }

  /** One MCP request's time, by OpenTelemetry's MCP conventions (error_type empty when it succeeded). */
  mcpRequest(method: string, fn: string, errorType: string | undefined, transport: string, seconds: number): void {
    this.mcpSeconds.observe(
      { mcp_method_name: method, gen_ai_tool_name: fn, error_type: errorType ?? '', network_transport: transport },
      seconds,
    );
  }

  /** A sandbox started; the returned function says it stopped, and why. */
  sandboxStarted(kind: 'server' | 'harness', name: string): (reason: string) => void {
    this.sandboxesStarted.inc({ kind, name });
    this.sandboxes++;
    let done = false;
    return (reason) => {
      if (done) return;
      done = true;
      this.sandboxes--;
      this.sandboxesStopped.inc({ kind, name, reason });
    };
  }

  /** A harness session started on this node; the returned function says it ended. */
  sessionStarted(): () => void {
    this.sessions++;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.sessions--;
    };
  }

  gatewayCall(tool: string, tenant: string, outcome: string): void {
    this.gatewayCalls.inc({ tool, tenant, outcome });
  }

  /** The exposition text of this node's series. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  get contentType(): string {
    return this.registry.contentType;
  }
}
