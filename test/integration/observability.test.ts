/**
 * SPEC O1-O4, against the real parts: `oz0 worker` processes with a real Temporal dev server, the example ledger over
 * stdio, a real OTLP receiver (test/helpers/otlp.ts: the three protocols, decoded as a collector would) and Debian's
 * `promtool` on what `/metrics` serves. What is asserted is what crossed the wire: the spans the receiver got, the
 * `traceparent` the server got, the series a scrape got.
 */
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { ROOT_CONTEXT, context, propagation, trace } from '@opentelemetry/api';
import { NodeTracerProvider } from '@opentelemetry/sdk-trace-node';
import { SamplingDecision, SimpleSpanProcessor, TraceIdRatioBasedSampler } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { Resource } from '@opentelemetry/resources';
import { OpenTelemetryWorkflowClientInterceptor } from '@temporalio/interceptors-opentelemetry';
import { readReceived } from '../../examples/common';
import { JAEGER_VERSION, startJaeger } from '../../deploy/local-cluster/jaeger';
import { freePort } from '../../worker/dev-server';
import { startHttpExample, startWorker as startWorkerProcess } from '../../worker/processes';
import { createNode } from '../../worker/node';
import { callsOf } from '../../model/job';
import type { JobTrace, SessionTrace, StepTrace } from '../../model/job';
import { findPrometheus, startPrometheus, withoutReleaseLabels } from '../helpers/prometheus';
import { python, pythonExample, pythonMissing } from '../helpers/python';
import { probeHarness, sandboxed } from '../helpers/sandbox';
import { startOtlpReceiver } from '../helpers/otlp';
import type { OtlpReceiver, ReceivedSpan } from '../helpers/otlp';
import {
  ROOT,
  approve,
  eventually,
  example,
  killTree,
  logger,
  sealedWithFileKeys,
  testClient,
  tmpDir,
  uniqueId,
  useTemporal,
} from '../helpers/temporal';
import type { LoadedConfig } from '../../common/config';

/** OTLP's SPAN_KIND_SERVER and SPAN_KIND_CLIENT. */
const SERVER = 2;
const CLIENT = 3;

const temporal = useTemporal();
let receiver: OtlpReceiver;
const workers: ChildProcess[] = [];

beforeAll(async () => {
  receiver = await startOtlpReceiver();
});

afterAll(async () => {
  // Its workers log to files of their own (worker() below), so they are started here, not by temporal.startWorker.
  for (const w of workers) if (w.pid) killTree(w.pid);
  await receiver?.close();
});

function promtool(): string | undefined {
  try {
    return execFileSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/**
 * Debian's Prometheus (prometheus, promtool) is not on a fresh machine and has no pinned copy oz0 could fetch itself:
 * .ci/run installs it; elsewhere the tests that need it are skipped, saying why in their titles, as Jaeger's is.
 */
const promtoolBin = promtool();
const prometheusFound = findPrometheus();
const PROMETHEUS_MISSING = 'no prometheus or promtool on PATH: apt-get install prometheus (Debian), as .ci/run does';
const withPromtool: jest.It = promtoolBin ? test : (test.skip as jest.It);
/** What the O1-O4 test's node served on /metrics, for promtool's check below. */
let served: string | undefined;

/** A ledger over stdio that logs what it receives, a tenant that may not refund, and a config file for a worker. */
function ledgerSetup(tenant: string, extra: Record<string, unknown> = {}) {
  const dir = tmpDir();
  const received = path.join(dir, 'received.jsonl');
  const servers = {
    ledger: {
      command: 'node',
      args: [example('ledger')],
      env: { OZ0_RECEIVED_LOG: received, LEDGER_FILE: path.join(dir, 'ledger.jsonl') },
    },
  };
  const tenants = { [tenant]: { policy: { 'ledger.refund': 'deny', 'ledger.*': 'allow' } } };
  const node = { heartbeatTimeoutSeconds: 10, stateDir: path.join(dir, 'state') };
  const config = temporal.config({ servers, tenants, node, ...extra });
  const file = path.join(dir, 'oz0.config.json');
  fs.writeFileSync(file, JSON.stringify({ temporal: config.temporal, servers, tenants, node, ...extra }));
  return { config, file, received, dir };
}

/** `oz0 worker` with these variables (OTEL_*, OZ0_METRICS_PORT); its log goes to this file's log and to `log`. */
async function worker(file: string, name: string, env: Record<string, string>) {
  const logFile = path.join(path.dirname(file), `${name}.log`);
  // The test's keys (D4): its client seals the jobs' specs with them.
  sealedWithFileKeys(file);
  const started = await startWorkerProcess(file, name, workers, {
    logFile,
    env: { OTEL_BSP_SCHEDULE_DELAY: '100', ...env },
  });
  return { ...started, logFile };
}

/** Issue 56: what a node of this build says it is, as `oz0 worker --version --json` says it. */
function builtRelease(): { release: string; buildId: string } {
  return JSON.parse(
    execFileSync(path.join(ROOT, 'bin', 'oz0'), ['worker', '--version', '--json'], { encoding: 'utf8' }),
  ) as { release: string; buildId: string };
}

/** Starts a job on the config's task queue. */
function startJob(config: LoadedConfig, workflowId: string, spec: unknown) {
  return temporal.client.workflow.start('job', { taskQueue: config.temporal.taskQueue, workflowId, args: [spec] });
}

function spansOf(traceId: string): ReceivedSpan[] {
  return receiver.spans.filter((s) => s.traceId === traceId);
}

/** A client of the caller's own, tracing into the same receiver: jobs it starts inside a span join that trace. */
function tracedCaller() {
  const provider = new NodeTracerProvider({
    resource: new Resource({ 'service.name': 'caller' }),
    spanProcessors: [new SimpleSpanProcessor(new OTLPTraceExporter({ url: `${receiver.httpEndpoint}/v1/traces` }))],
  });
  provider.register();
  const client = testClient(temporal.connection, temporal.server.namespace, {
    interceptors: { workflow: [new OpenTelemetryWorkflowClientInterceptor()] },
  });
  return { provider, client, tracer: provider.getTracer('caller') };
}

test('O1-O4: one job seen whole — a trace the caller started, its spans, the traceparent the server got, the series on /metrics, trace ids on log lines', async () => {
  const tenant = uniqueId('t');
  const { config, file, received } = ledgerSetup(tenant);
  const port = await freePort();
  const node = await worker(file, 'traced', {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/protobuf',
    OZ0_METRICS_PORT: String(port),
  });
  const caller = tracedCaller();
  const jobId = uniqueId('obs');
  const spec = {
    tenant,
    steps: [
      { call: 'ledger.charge', args: { order_id: 'o-1', amount: 5 } },
      { call: 'ledger.refund', args: { order_id: 'o-1', amount: 5 } },
      { call: 'ledger.lookup_order', args: { order_id: 7 } },
      { call: 'ledger.no_such_function', args: {} },
    ],
  };
  const span = caller.tracer.startSpan('caller starts a job');
  const traceId = span.spanContext().traceId;
  const handle = await context.with(trace.setSpan(ROOT_CONTEXT, span), () =>
    caller.client.workflow.start('job', { taskQueue: config.temporal.taskQueue, workflowId: jobId, args: [spec] }),
  );
  const result: JobTrace = await handle.result();
  const stepsOf = result.steps as StepTrace[];
  span.end();
  await caller.provider.shutdown();
  // This process's own SDK is the caller's only: the node in-process below must find none.
  trace.disable();
  propagation.disable();
  context.disable();
  expect(stepsOf.map((s) => s.attempts.at(-1)?.outcome)).toEqual(['ok', 'refused', 'error', 'failed']);

  // O2: every span of the job is in the caller's trace, as the receiver got it.
  const spans = await eventually(
    () => {
      const all = spansOf(traceId);
      return all.some((s) => s.name === 'RunWorkflow:job') && all.filter((s) => s.kind === CLIENT).length >= 2
        ? all
        : undefined;
    },
    30_000,
    'the job’s spans at the receiver',
  );
  const root = spans.find((s) => s.name === 'caller starts a job')!;
  const job = spans.find((s) => s.name === 'RunWorkflow:job')!;
  expect(job.attributes['oz0.job']).toBe(jobId);
  expect(job.attributes['oz0.tenant']).toBe(tenant);
  const byId = new Map(spans.map((s) => [s.spanId, s]));
  const ancestors = (s: ReceivedSpan): string[] => {
    const out: string[] = [];
    for (let p = byId.get(s.parentSpanId); p; p = byId.get(p.parentSpanId)) out.push(p.spanId);
    return out;
  };
  expect(ancestors(job)).toContain(root.spanId);

  const steps = spans.filter((s) => s.name === 'StartActivity:callTool');
  expect(steps.map((s) => s.attributes['oz0.tool']).sort()).toEqual(spec.steps.map((s) => s.call).sort());
  const attempts = spans.filter((s) => s.name === 'RunActivity:callTool');
  expect(attempts.length).toBe(4);
  // Issue 56: each attempt says the release and the build id of the node that ran it; its resource, the release.
  const built = builtRelease();
  for (const a of attempts) {
    expect(a.attributes).toMatchObject({ 'oz0.release': built.release, 'oz0.build_id': built.buildId });
    expect(a.serviceVersion).toBe(built.release);
    expect(a.attributes['oz0.attempt']).toBe(1);
    expect(byId.get(a.parentSpanId)?.name).toBe('StartActivity:callTool');
    expect(ancestors(a)).toContain(job.spanId);
  }
  expect(attempts.map((a) => a.attributes['oz0.outcome']).sort()).toEqual(['error', 'failed', 'ok', 'refused']);

  // The MCP client spans: only calls that were sent have one (the refused and the unknown function sent nothing).
  const calls = spans.filter((s) => s.kind === CLIENT && s.name.startsWith('tools/call '));
  expect(calls.map((s) => s.name).sort()).toEqual(['tools/call charge', 'tools/call lookup_order']);
  const charge = calls.find((s) => s.name === 'tools/call charge')!;
  const lookup = calls.find((s) => s.name === 'tools/call lookup_order')!;
  const chargeStep = stepsOf[0];
  expect(charge.attributes).toMatchObject({
    'mcp.method.name': 'tools/call',
    'gen_ai.tool.name': 'charge',
    'gen_ai.operation.name': 'execute_tool',
    'network.transport': 'pipe',
    'oz0.tenant': tenant,
    'oz0.key': chargeStep.key,
    'oz0.attempt': 1,
    'oz0.outcome': 'ok',
  });
  expect(charge.attributes['error.type']).toBeUndefined();
  expect(byId.get(charge.parentSpanId)?.name).toBe('RunActivity:callTool');
  expect(lookup.attributes).toMatchObject({ 'error.type': 'tool_error', 'oz0.outcome': 'error' });
  expect(lookup.status.code).toBe(2);

  // O3: the server got the client span's own context, and the request id on the span is the one it got.
  const got = readReceived(received);
  const chargeGot = got.find((r) => r.tool === 'charge')!;
  expect(chargeGot.traceparent).toBe(`00-${traceId}-${charge.spanId}-01`);
  expect(charge.attributes['jsonrpc.request.id']).toBe(String(chargeGot.requestId));

  // O4: the node's lines logged inside the attempt carry its trace's ids.
  const lines = fs
    .readFileSync(node.logFile, 'utf8')
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const traced = lines.filter((l) => l.trace_id === traceId);
  expect(traced.length).toBeGreaterThan(0);
  expect(traced.every((l) => typeof l.span_id === 'string' && byId.has(l.span_id as string))).toBe(true);
  // Issue 56: its first line says what it is, and so does its start line.
  expect(lines[0]).toMatchObject({ node: 'traced', release: built.release, build_id: built.buildId });
  expect(fs.readFileSync(node.logFile, 'utf8')).toMatch(
    new RegExp(
      `^oz0 worker: node traced on .*, release ${built.release.replace(/[.+]/g, '\\$&')} .*build id ${built.buildId}$`,
      'm',
    ),
  );

  // O1: the series, by tool, server, tenant and outcome, and the Temporal SDK's own, on one scrape.
  const res = await fetch(`http://127.0.0.1:${port}/metrics`);
  expect(res.status).toBe(200);
  const text = await res.text();
  const series = (name: string, labels: Record<string, string>) =>
    text
      .split('\n')
      .find((l) => l.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)));
  const value = (line: string | undefined) => Number(line?.split(' ').at(-1));
  expect(value(series('oz0_calls_total', { tool: 'ledger.charge', server: 'ledger', tenant, outcome: 'ok' }))).toBe(1);
  expect(value(series('oz0_calls_total', { tool: 'ledger.refund', tenant, outcome: 'refused' }))).toBe(1);
  expect(value(series('oz0_calls_total', { tool: 'ledger.lookup_order', tenant, outcome: 'error' }))).toBe(1);
  // A function the server does not list is not a label value of its own (bounded cardinality).
  expect(value(series('oz0_calls_total', { tool: 'ledger.(unknown)', tenant, outcome: 'failed' }))).toBe(1);
  expect(value(series('oz0_attempts_total', { tool: 'ledger.charge', tenant, outcome: 'ok' }))).toBe(1);
  expect(value(series('oz0_policy_refusals_total', { tool: 'ledger.refund', tenant }))).toBe(1);
  expect(value(series('oz0_attempt_duration_seconds_count', { tool: 'ledger.charge', outcome: 'ok' }))).toBe(1);
  expect(
    value(
      series('mcp_client_operation_duration_seconds_count', {
        gen_ai_tool_name: 'lookup_order',
        error_type: 'tool_error',
      }),
    ),
  ).toBe(1);
  expect(withoutReleaseLabels(text)).toMatch(/^oz0_calls_running 0$/m);
  expect(withoutReleaseLabels(text)).toMatch(/^oz0_slots_free 100$/m);
  // The SDK's worker metrics, from the node's Temporal runtime, on the same target.
  expect(text).toMatch(/^temporal_activity_execution_latency_seconds_count\{/m);
  expect(text).toMatch(/^temporal_worker_task_slots_available\{/m);
  // Issue 56: every series says the node's release and build id, the SDK's too; oz0_build_info names the node.
  const samples = text.split('\n').filter((l) => l && !l.startsWith('#'));
  const labels = [`release="${built.release}"`, `build_id="${built.buildId}"`];
  expect(samples.filter((l) => !labels.every((label) => l.includes(label)))).toEqual([]);
  expect(samples.filter((l) => l.startsWith('temporal_')).length).toBeGreaterThan(10);
  expect(value(series('oz0_build_info', { node: 'traced', release: built.release, build_id: built.buildId }))).toBe(1);
  // No job id, key or argument in any label.
  expect(text).not.toContain(jobId);
  expect(text).not.toContain(chargeStep.key);
  expect(text).not.toContain('o-1');

  served = text;
}, 120_000);

withPromtool(
  `O1: what that node served on /metrics passes promtool check metrics${promtoolBin ? '' : ` (skipped: ${PROMETHEUS_MISSING})`}`,
  () => {
    if (served === undefined) throw new Error('the O1-O4 test above failed before its node served /metrics');
    expect(execFileSync(promtoolBin!, ['check', 'metrics'], { input: served, encoding: 'utf8' })).toBe('');
  },
);

test.each([
  ['http/json', () => receiver.httpEndpoint],
  ['grpc', () => receiver.grpcEndpoint],
] as const)(
  'O2: spans go out over OTLP %s too',
  async (protocol, endpoint) => {
    const tenant = uniqueId('t');
    const { config, file } = ledgerSetup(tenant);
    await worker(file, `traced-${protocol.replace('/', '-')}`, {
      OTEL_EXPORTER_OTLP_ENDPOINT: endpoint(),
      OTEL_EXPORTER_OTLP_PROTOCOL: protocol,
    });
    const jobId = uniqueId('proto');
    const handle = await startJob(config, jobId, {
      tenant,
      steps: [{ call: 'ledger.charge', args: { order_id: 'o-2', amount: 1 } }],
    });
    await handle.result();
    const job = await eventually(
      () => receiver.spans.find((s) => s.name === 'RunWorkflow:job' && s.attributes['oz0.job'] === jobId),
      30_000,
      `the job's span over ${protocol}`,
    );
    expect(job.via).toBe(protocol);
    // Without a caller's trace, the job's run is the root of its own.
    expect(job.parentSpanId).toBe('');
    const call = await eventually(
      () => spansOf(job.traceId).find((s) => s.kind === CLIENT && s.name === 'tools/call charge'),
      30_000,
      'the tools/call span',
    );
    expect(call.via).toBe(protocol);
  },
  120_000,
);

test('O2: a job that continues as new is still one trace: each run a child of the run before', async () => {
  const tenant = uniqueId('t');
  const { config, file } = ledgerSetup(tenant, { jobs: { continueAsNewAfterCalls: 1 } });
  await worker(file, 'continues', { OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint });
  const jobId = uniqueId('can');
  const steps = [1, 2, 3].map((n) => ({ call: 'ledger.charge', args: { order_id: `c-${n}`, amount: n } }));
  const result: JobTrace = await (await startJob(config, jobId, { tenant, steps })).result();
  expect(result.run).toBe(2);
  const runs = await eventually(
    () => {
      const found = receiver.spans.filter((s) => s.name === 'RunWorkflow:job' && s.attributes['oz0.job'] === jobId);
      return found.length === 3 ? found : undefined;
    },
    30_000,
    'three runs',
  );
  expect(new Set(runs.map((r) => r.traceId)).size).toBe(1);
  const spans = spansOf(runs[0].traceId);
  const byId = new Map(spans.map((s) => [s.spanId, s]));
  // Each later run hangs under the one before (its ContinueAsNew span), so the runs form one chain.
  const roots = runs.filter((r) => !byId.has(r.parentSpanId));
  expect(roots).toHaveLength(1);
  expect(spans.filter((s) => s.kind === CLIENT && s.name === 'tools/call charge')).toHaveLength(3);
}, 120_000);

test('O2: a sampler (OTEL_TRACES_SAMPLER) keeps or drops each job’s trace whole, and its server hears which', async () => {
  const tenant = uniqueId('t');
  const { config, file, received } = ledgerSetup(tenant);
  await worker(file, 'sampled', {
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint,
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: '0.5',
  });
  const reference = new TraceIdRatioBasedSampler(0.5);
  // Jobs of no caller's trace (each begins its own) until both a kept and a dropped one have run; each makes two calls.
  const jobs: Array<{ order: string; traceId: string; kept: boolean }> = [];
  for (let n = 0; n < 16 && !(jobs.some((j) => j.kept) && jobs.some((j) => !j.kept)); n++) {
    const order = `s-${n}`;
    const steps = [1, 2].map(() => ({ call: 'ledger.lookup_order', args: { order_id: order } }));
    await (await startJob(config, uniqueId('sampled'), { tenant, steps })).result();
    // O3: the server hears the call's trace whether it is kept or not, and the sampled flag says which.
    const heard = readReceived(received).filter((r) => (r.args as { order_id?: string })?.order_id === order);
    expect(heard).toHaveLength(2);
    const parts = heard.map((r) => /^00-([0-9a-f]{32})-[0-9a-f]{16}-(0[01])$/.exec(String(r.traceparent)));
    expect(parts.every(Boolean)).toBe(true);
    const traceId = parts[0]![1];
    expect(parts[1]![1]).toBe(traceId);
    const kept = reference.shouldSample(ROOT_CONTEXT, traceId).decision === SamplingDecision.RECORD_AND_SAMPLED;
    expect(parts.map((m) => m![2])).toEqual(kept ? ['01', '01'] : ['00', '00']);
    jobs.push({ order, traceId, kept });
  }
  expect(jobs.some((j) => j.kept) && jobs.some((j) => !j.kept)).toBe(true);
  // A kept job's trace arrives whole: its run, its two steps, their attempts and MCP calls. The node exports its spans
  // in the order they end, so once the last kept job's have arrived, any of a dropped one would have too.
  const whole = (traceId: string) => {
    const spans = spansOf(traceId);
    const count = (name: string) => spans.filter((s) => s.name === name).length;
    return count('RunWorkflow:job') === 1 &&
      count('StartActivity:callTool') === 2 &&
      count('RunActivity:callTool') === 2 &&
      count('tools/call lookup_order') === 2
      ? spans
      : undefined;
  };
  for (const job of jobs.filter((j) => j.kept))
    await eventually(() => whole(job.traceId), 30_000, 'a kept job’s trace');
  await new Promise((r) => setTimeout(r, 1000));
  for (const job of jobs) {
    if (job.kept) expect(whole(job.traceId)).toBeDefined();
    else expect(spansOf(job.traceId)).toEqual([]);
  }
}, 180_000);

test('O1-O2: a remote server on 2025-11-25: the client span names its MCP session; a job cancel is timed from cancel to stopped', async () => {
  const dir = tmpDir();
  const received = path.join(dir, 'received.jsonl');
  const ledger = await startHttpExample(example('ledger'), {
    OZ0_RECEIVED_LOG: received,
    LEDGER_FILE: path.join(dir, 'ledger.jsonl'),
  });
  try {
    const tenant = uniqueId('t');
    const servers = { remote: { url: ledger.url, protocol: '2025-11-25' } };
    const node = { heartbeatTimeoutSeconds: 10, stateDir: path.join(dir, 'state') };
    const config = temporal.config({ servers, node });
    const file = path.join(dir, 'oz0.config.json');
    fs.writeFileSync(file, JSON.stringify({ temporal: config.temporal, servers, node }));
    const port = await freePort();
    await worker(file, 'remote', {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint,
      OZ0_METRICS_PORT: String(port),
    });
    await approve(temporal, config, tenant, 'remote');
    const jobId = uniqueId('remote');
    await (
      await startJob(config, jobId, {
        tenant,
        steps: [{ call: 'remote.charge', args: { order_id: 'r-1', amount: 1 } }],
      })
    ).result();
    const call = await eventually(
      () => receiver.spans.find((s) => s.kind === CLIENT && s.attributes['oz0.job'] === jobId),
      30_000,
      'the tools/call span',
    );
    expect(call.attributes).toMatchObject({ 'network.transport': 'tcp', 'mcp.protocol.version': '2025-11-25' });
    expect(call.attributes['mcp.session.id']).toEqual(expect.stringMatching(/^[0-9a-f-]{36}$/));

    // C1 as a series: the cancel's time to the attempt's stop, under the outcome's word.
    const slow = await startJob(config, uniqueId('cancel'), {
      tenant,
      steps: [{ call: 'remote.slow_charge', args: { order_id: 'r-2', amount: 1, ms: 60_000 } }],
    });
    await eventually(() => readReceived(received).find((r) => r.tool === 'slow_charge'), 30_000, 'the slow call');
    await slow.cancel();
    await expect(slow.result()).rejects.toThrow();
    const text = await eventually(
      async () => {
        const body = withoutReleaseLabels(await (await fetch(`http://127.0.0.1:${port}/metrics`)).text());
        return /^oz0_cancel_to_stopped_seconds_count\{tool="remote.slow_charge",cause="cancelled"\} 1$/m.test(body)
          ? body
          : undefined;
      },
      20_000,
      'the cancel in the series',
    );
    expect(text).toMatch(
      /^oz0_calls_total\{tool="remote.slow_charge",server="remote",tenant="[^"]+",outcome="cancelled"\} 1$/m,
    );
  } finally {
    await ledger.close();
  }
}, 120_000);

test('O1-O3 off: a node with neither set serves no /metrics and sends no traceparent', async () => {
  const tenant = uniqueId('t');
  const { config, received } = ledgerSetup(tenant);
  expect(config.node.metricsPort).toBeUndefined();
  const node = await createNode({ config, logger });
  expect(node.metricsUrl).toBeUndefined();
  await node.runUntil(async () => {
    const handle = await startJob(config, uniqueId('off'), {
      tenant,
      steps: [{ call: 'ledger.charge', args: { order_id: 'o-3', amount: 1 } }],
    });
    await handle.result();
  });
  const got = readReceived(received).find((r) => r.tool === 'charge')!;
  expect(got.key).toBeDefined();
  expect(got.traceparent).toBeUndefined();
  // This process runs no SDK: nothing reached the receiver from it.
  expect(receiver.spans.some((s) => s.service === 'oz0' && s.attributes['oz0.tenant'] === tenant)).toBe(false);
}, 120_000);

/**
 * One node as a platform runs it — the Python ledger (busy first, its own spans exported), a harness through the
 * gateway, a time limit, a refusal — scraped by a real Prometheus while the job runs; then every panel of the Grafana
 * dashboard (deploy/grafana/oz0-dashboard.json) is asked of that Prometheus.
 */
(python && 'path' in prometheusFound ? test : test.skip)(
  `O1-O3: the Python server's spans join the call's, the gateway continues a harness's trace, a real Prometheus scrapes the node and every dashboard panel gets data${python ? ('path' in prometheusFound ? '' : ` (skipped: ${PROMETHEUS_MISSING})`) : ` (skipped: ${pythonMissing})`}`,
  async () => {
    const found = prometheusFound;
    if ('why' in found) throw new Error(found.why);
    const tenant = uniqueId('t');
    const dir = tmpDir();
    const servers = {
      ledger: {
        command: python!,
        args: [pythonExample('ledger')],
        env: {
          LEDGER_FILE: path.join(dir, 'ledger.db'),
          LEDGER_BUSY_FIRST: '1',
          // O3: the server exports its own spans (examples/python/oz0_kit.py export_spans).
          OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint,
          OTEL_BSP_SCHEDULE_DELAY: '100',
          OTEL_SERVICE_NAME: 'python-ledger',
        },
      },
    };
    // The config is a file in a folder of its own: its sandbox's paths are the project's, absolute.
    const harnesses = {
      probe: probeHarness(['ledger.*'], { read: sandboxed().read.map((p) => path.resolve(ROOT, p)) }),
    };
    const tenants = { [tenant]: { policy: { 'ledger.refund': 'deny', 'ledger.*': 'allow' } } };
    const tools = { 'ledger.slow_charge': { timeoutSeconds: 2, maxAttempts: 1 } };
    const node = { heartbeatTimeoutSeconds: 10, stateDir: path.join(dir, 'state') };
    const config = temporal.config({ servers, harnesses, tenants, tools, node });
    const file = path.join(dir, 'oz0.config.json');
    fs.writeFileSync(file, JSON.stringify({ temporal: config.temporal, servers, harnesses, tenants, tools, node }));
    const port = await freePort();
    await worker(file, 'platform', {
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.httpEndpoint,
      OZ0_METRICS_PORT: String(port),
    });
    const prometheus = await startPrometheus(found.path, [`127.0.0.1:${port}`]);
    try {
      await eventually(async () => ((await prometheus.query('up{job="oz0"} == 1')).length ? true : undefined));
      // The harness's own trace: the gateway takes its traceparent as the parent of the call.
      const harnessTrace = randomBytes(16).toString('hex');
      const harnessSpan = randomBytes(8).toString('hex');
      const runJob = async (jobId: string, order: string): Promise<JobTrace> => {
        const handle = await startJob(config, jobId, {
          tenant,
          steps: [
            { call: 'ledger.charge', args: { order_id: order, amount: 3 } },
            { call: 'ledger.refund', args: { order_id: order, amount: 3 } },
            { call: 'ledger.slow_charge', args: { order_id: `${order}-slow`, amount: 3, ms: 20_000 } },
            {
              session: {
                harness: 'probe',
                input: {
                  steps: [
                    {
                      call: 'ledger.lookup_order',
                      args: { order_id: order },
                      meta: { traceparent: `00-${harnessTrace}-${harnessSpan}-01` },
                    },
                    { call: 'ledger.lookup_order', args: { order_id: `${order}-slow` } },
                  ],
                },
              },
            },
          ],
        });
        return handle.result();
      };
      const jobId = uniqueId('platform');
      const result = await runJob(jobId, 'p-1');
      const outcomes = callsOf(result).map((s) => s.attempts.map((a) => a.outcome).join(','));
      expect(outcomes).toEqual(['busy,ok', 'refused', 'timeout', 'ok', 'ok']);

      // O3: the Python SDK's server span of the charge that answered is a child of oz0's tools/call client span.
      const job = await eventually(
        () => receiver.spans.find((s) => s.name === 'RunWorkflow:job' && s.attributes['oz0.job'] === jobId),
        30_000,
        'the job span',
      );
      const pyCharges = await eventually(
        () => {
          const found = spansOf(job.traceId).filter(
            (s) => s.service === 'python-ledger' && s.name === 'tools/call charge',
          );
          return found.length === 2 ? found : undefined;
        },
        30_000,
        "the Python ledger's two charge spans",
      );
      const clients = spansOf(job.traceId).filter((s) => s.kind === CLIENT && s.name === 'tools/call charge');
      expect(clients).toHaveLength(2);
      for (const py of pyCharges) {
        expect(py.kind).toBe(SERVER);
        expect(clients.map((c) => c.spanId)).toContain(py.parentSpanId);
        expect(py.attributes['mcp.method.name']).toBe('tools/call');
      }
      // The busy answer is an error result: error.type tool_error on the client span, and busy its outcome.
      const busy = clients.find((c) => c.attributes['oz0.attempt'] === 1)!;
      expect(busy.attributes).toMatchObject({ 'error.type': 'tool_error', 'oz0.outcome': 'busy' });
      expect(clients.find((c) => c.attributes['oz0.attempt'] === 2)?.attributes['oz0.outcome']).toBe('ok');

      // O3: the harness's call with a traceparent is in the harness's trace, under its span, down to the MCP request.
      const gatewayCalls = await eventually(
        () => {
          const found = receiver.spans.filter(
            (s) =>
              s.kind === SERVER && s.name === 'tools/call ledger.lookup_order' && s.attributes['oz0.job'] === jobId,
          );
          return found.length === 2 ? found : undefined;
        },
        30_000,
        "the gateway's spans",
      );
      const own = gatewayCalls.find((s) => s.traceId === harnessTrace)!;
      expect(own.parentSpanId).toBe(harnessSpan);
      const inHarnessTrace = await eventually(
        () => spansOf(harnessTrace).find((s) => s.kind === CLIENT && s.name === 'tools/call lookup_order'),
        30_000,
        'the MCP request in the harness trace',
      );
      expect(inHarnessTrace.attributes['oz0.job']).toBe(jobId);
      // The other, sent without one, is in the job's trace, under the session's span.
      const other = gatewayCalls.find((s) => s !== own)!;
      expect(other.traceId).toBe(job.traceId);
      expect(spansOf(job.traceId).find((s) => s.spanId === other.parentSpanId)?.name).toBe('RunActivity:runHarness');
      // The harness was started in the session's trace (OZ0_TRACEPARENT in its environment, I5's prefix).
      const session = result.steps[3] as SessionTrace;
      expect((session.result?.structuredContent as { env?: string[] } | undefined)?.env).toContain('OZ0_TRACEPARENT');

      // O1: a real Prometheus has the series; every dashboard panel's query returns data.
      await eventually(
        async () => ((await prometheus.query(`oz0_gateway_calls_total{tenant="${tenant}"}`)).length ? true : undefined),
        20_000,
        'the last scrape',
      );
      // Again, so every series has moved within Prometheus' window: a series' first value is no increase to rate().
      await runJob(uniqueId('platform'), 'p-2');
      await new Promise((r) => setTimeout(r, 2500));
      const dashboard = JSON.parse(
        fs.readFileSync(path.join(ROOT, 'deploy', 'grafana', 'oz0-dashboard.json'), 'utf8'),
      ) as {
        panels: Array<{ title: string; targets: Array<{ expr: string }> }>;
      };
      const empty: string[] = [];
      for (const panel of dashboard.panels) {
        let data = 0;
        for (const target of panel.targets) {
          const expr = target.expr
            .replaceAll('$__rate_interval', '5m')
            .replaceAll('$tenant', tenant)
            .replaceAll('$instance', '.*');
          data += (await prometheus.query(expr)).filter((r) => Number.isFinite(r.value)).length;
        }
        if (data === 0) empty.push(panel.title);
      }
      expect(empty).toEqual([]);
      // Sandboxes (the harness ran in one per session), sessions and the gateway's calls, as Prometheus has them.
      const one = async (expr: string) => (await prometheus.query(expr))[0]?.value;
      expect(await one('sum(oz0_sandboxes_started_total{kind="harness",name="probe"})')).toBe(2);
      expect(await one('sum(oz0_sandboxes_stopped_total{kind="harness",name="probe",reason="exit"})')).toBe(2);
      expect(await one('sum(oz0_sandboxes_running)')).toBe(0);
      expect(await one('sum(oz0_sessions_live)')).toBe(0);
      expect(
        await one(`sum(oz0_gateway_calls_total{tenant="${tenant}",tool="ledger.lookup_order",outcome="ok"})`),
      ).toBe(4);
      const calls = await prometheus.query(`sum by (outcome) (oz0_calls_total{tenant="${tenant}"})`);
      expect(Object.fromEntries(calls.map((c) => [c.metric.outcome, c.value]))).toEqual({
        ok: 6,
        refused: 2,
        timeout: 2,
      });
    } finally {
      await prometheus.stop();
    }
  },
  180_000,
);

const jaegerBin = path.join(ROOT, '.tools', 'jaeger', JAEGER_VERSION, 'jaeger');
const withJaeger: jest.It = fs.existsSync(jaegerBin) ? test : (test.skip as jest.It);

interface JaegerTrace {
  traceID: string;
  spans: Array<{
    spanID: string;
    operationName: string;
    references: Array<{ refType: string; spanID: string }>;
    tags: Array<{ key: string; value: unknown }>;
  }>;
}

withJaeger(
  `O2: Jaeger receives a job as one trace, read back through its own query API${fs.existsSync(jaegerBin) ? '' : ' (skipped: no Jaeger; npm run jaeger:install builds it, as .ci/run does)'}`,
  async () => {
    const jaeger = await startJaeger(jaegerBin, tmpDir('oz0-jaeger-'));
    try {
      const tenant = uniqueId('t');
      const { config, file } = ledgerSetup(tenant);
      await worker(file, 'to-jaeger', { OTEL_EXPORTER_OTLP_ENDPOINT: jaeger.otlpHttp });
      const jobId = uniqueId('jaeger');
      const handle = await startJob(config, jobId, {
        tenant,
        steps: [
          { call: 'ledger.charge', args: { order_id: 'j-1', amount: 2 } },
          { call: 'ledger.lookup_order', args: { order_id: 7 } },
        ],
      });
      await handle.result();
      const tags = encodeURIComponent(JSON.stringify({ 'oz0.job': jobId }));
      const found = await eventually(
        async () => {
          const res = await fetch(`${jaeger.queryUrl}/api/traces?service=oz0&operation=RunWorkflow:job&tags=${tags}`);
          const { data } = (await res.json()) as { data: JaegerTrace[] | null };
          return data?.length ? data[0] : undefined;
        },
        30_000,
        "the job's trace in Jaeger",
      );
      // The whole trace, once every span has arrived: job, steps, attempts, MCP requests.
      const trace = await eventually(
        async () => {
          const res = await fetch(`${jaeger.queryUrl}/api/traces/${found.traceID}`);
          const { data } = (await res.json()) as { data: JaegerTrace[] };
          const spans = data[0]?.spans ?? [];
          return spans.filter((s) => s.operationName.startsWith('tools/call ')).length === 2 ? data[0] : undefined;
        },
        30_000,
        'every span of the trace',
      );
      const names = trace.spans.map((s) => s.operationName);
      expect(names.filter((n) => n === 'RunWorkflow:job')).toHaveLength(1);
      expect(names.filter((n) => n === 'StartActivity:callTool')).toHaveLength(2);
      expect(names.filter((n) => n === 'RunActivity:callTool')).toHaveLength(2);
      const byId = new Map(trace.spans.map((s) => [s.spanID, s]));
      const tag = (s: JaegerTrace['spans'][number], key: string) => s.tags.find((t) => t.key === key)?.value;
      const lookup = trace.spans.find((s) => s.operationName === 'tools/call lookup_order')!;
      expect(tag(lookup, 'error.type')).toBe('tool_error');
      expect(tag(lookup, 'gen_ai.tool.name')).toBe('lookup_order');
      const parent = byId.get(lookup.references.find((r) => r.refType === 'CHILD_OF')!.spanID)!;
      expect(parent.operationName).toBe('RunActivity:callTool');
      expect(tag(parent, 'oz0.outcome')).toBe('error');
    } finally {
      await jaeger.stop();
    }
  },
  120_000,
);
