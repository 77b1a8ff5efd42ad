/**
 * SPEC O1, O2, O4 in pure parts: the metrics port's config and variable, which OTEL_* variables turn tracing on,
 * bounded labels, what a NodeMetrics serves (checked by Debian's promtool where it is installed), and the log lines'
 * trace ids.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type pino from 'pino';
import { ROOT_CONTEXT, context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { BasicTracerProvider } from '@opentelemetry/sdk-trace-base';
import { ConfigError, loadConfig, parseConfig } from '../../common/config';
import { createLogger } from '../../common/logger';
import { NodeMetrics, UNKNOWN, callLabels } from '../../activities/observe/metrics';
import { tracingTarget } from '../../worker/telemetry';

function tmp(): string {
  return fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-obs-'));
}

describe('O1: node.metricsPort and OZ0_METRICS_PORT', () => {
  test('O1: unset, no port: nothing listens', () => {
    expect(parseConfig({}).node.metricsPort).toBeUndefined();
    expect(loadConfig({ env: {}, cwd: tmp() }).node.metricsPort).toBeUndefined();
  });

  test('O1: the config names the port; OZ0_METRICS_PORT overrides it', () => {
    const dir = tmp();
    fs.writeFileSync(path.join(dir, 'oz0.config.json'), JSON.stringify({ node: { metricsPort: 9464 } }));
    expect(loadConfig({ env: {}, cwd: dir }).node.metricsPort).toBe(9464);
    expect(loadConfig({ env: { OZ0_METRICS_PORT: '9470' }, cwd: dir }).node.metricsPort).toBe(9470);
    expect(loadConfig({ env: { OZ0_METRICS_PORT: '' }, cwd: dir }).node.metricsPort).toBe(9464);
  });

  test.each(['http', '-1', '70000', '9464 ', '1e3'])('O1: OZ0_METRICS_PORT=%j is refused, naming the variable', (v) => {
    expect(() => loadConfig({ env: { OZ0_METRICS_PORT: v }, cwd: tmp() })).toThrow(ConfigError);
    expect(() => loadConfig({ env: { OZ0_METRICS_PORT: v }, cwd: tmp() })).toThrow(/OZ0_METRICS_PORT/);
  });

  test('O1: a bad node.metricsPort in the file names the field', () => {
    expect(() => parseConfig({ node: { metricsPort: 'x' } })).toThrow(/node\.metricsPort/);
  });
});

describe('O2: which variables turn tracing on', () => {
  const cases: Array<[string, Record<string, string>, Record<string, unknown> | undefined]> = [
    ['nothing set', {}, undefined],
    [
      'an endpoint: http/protobuf, the default',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://127.0.0.1:4318' },
      { protocol: 'http/protobuf' },
    ],
    [
      'a traces endpoint alone',
      { OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' },
      { protocol: 'http/protobuf' },
    ],
    [
      'http/json',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json' },
      { protocol: 'http/json' },
    ],
    [
      'the traces protocol wins over the general one',
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317',
        OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'grpc',
      },
      { protocol: 'grpc' },
    ],
    ['the SDK disabled', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_SDK_DISABLED: 'true' }, undefined],
    ['traces exporter none', { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_EXPORTER: 'none' }, undefined],
    ['an empty endpoint is unset', { OTEL_EXPORTER_OTLP_ENDPOINT: '' }, undefined],
    [
      'a ratio sampler and its argument',
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
        OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
        OTEL_TRACES_SAMPLER_ARG: '0.25',
      },
      { protocol: 'http/protobuf', sampler: { name: 'parentbased_traceidratio', ratio: 0.25 } },
    ],
    [
      'a ratio sampler without its argument keeps every trace, as OpenTelemetry reads it',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_SAMPLER: 'traceidratio' },
      { protocol: 'http/protobuf', sampler: { name: 'traceidratio', ratio: 1 } },
    ],
    [
      'an argument is for ratio samplers only',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_SAMPLER: 'always_off', OTEL_TRACES_SAMPLER_ARG: 'x' },
      { protocol: 'http/protobuf', sampler: { name: 'always_off', ratio: 1 } },
    ],
  ];
  test.each(cases)('O2: %s', (_what, env, expected) => {
    const target = tracingTarget(env);
    if (expected === undefined) expect(target).toBeUndefined();
    // OpenTelemetry's default sampler unless one is named.
    else expect(target).toEqual({ sampler: { name: 'parentbased_always_on', ratio: 1 }, ...expected });
  });

  test.each([
    [
      'a protocol OTLP has not',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_EXPORTER_OTLP_PROTOCOL: 'thrift' },
      /OTEL_EXPORTER_OTLP_PROTOCOL/,
    ],
    ['an endpoint that is no URL', { OTEL_EXPORTER_OTLP_ENDPOINT: 'collector' }, /OTEL_EXPORTER_OTLP_ENDPOINT/],
    [
      'a sampler the SDK has not',
      { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318', OTEL_TRACES_SAMPLER: 'jaeger_remote' },
      /OTEL_TRACES_SAMPLER: one of always_on, .*parentbased_traceidratio/,
    ],
    ...['1.5', '-0.1', 'half'].map((arg): [string, Record<string, string>, RegExp] => [
      `a ratio of ${arg}`,
      {
        OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4318',
        OTEL_TRACES_SAMPLER: 'traceidratio',
        OTEL_TRACES_SAMPLER_ARG: arg,
      },
      /OTEL_TRACES_SAMPLER_ARG/,
    ]),
  ])('O2: %s is refused, naming the variable', (_what, env, message) => {
    expect(() => tracingTarget(env)).toThrow(message);
  });
});

describe('O1: labels are bounded', () => {
  test.each([
    ['a listed function', 'ledger.charge', { server: true, fn: true }, { tool: 'ledger.charge', server: 'ledger' }],
    [
      'a function its server does not list',
      'ledger.x9f3',
      { server: true, fn: false },
      { tool: `ledger.${UNKNOWN}`, server: 'ledger' },
    ],
    ['a server the node has not', 'nope.x', { server: false, fn: false }, { tool: UNKNOWN, server: UNKNOWN }],
  ])('O1: %s', (_what, tool, known, expected) => {
    expect(callLabels(tool, known)).toEqual(expected);
  });

  test('O1: each series as a node serves it, and promtool check metrics passes on it', async () => {
    const metrics = new NodeMetrics(4);
    const done = metrics.attemptStarted();
    const labels = { tool: 'ledger.charge', server: 'ledger', tenant: 'acme' };
    metrics.attemptEnded({ ...labels, outcome: 'busy', seconds: 0.02, final: false });
    metrics.busyWait(labels, 1.5);
    done();
    metrics.attemptEnded({ ...labels, outcome: 'cancelled', seconds: 0.4, final: true, stoppedAfter: 0.05 });
    metrics.attemptEnded({ ...labels, tool: 'ledger.refund', outcome: 'refused', seconds: 0.001, final: true });
    metrics.mcpRequest('tools/call', 'charge', 'tool_error', 'pipe', 0.01);
    const stop = metrics.sandboxStarted('server', 'files');
    stop('limit');
    metrics.sessionStarted();
    metrics.gatewayCall('ledger.charge', 'acme', 'ok');
    const text = await metrics.text();
    expect(text).toMatch(
      /^oz0_calls_total\{tool="ledger.charge",server="ledger",tenant="acme",outcome="cancelled"\} 1$/m,
    );
    expect(text).toMatch(
      /^oz0_attempts_total\{tool="ledger.charge",server="ledger",tenant="acme",outcome="busy"\} 1$/m,
    );
    // A busy attempt with a next one is no call's end.
    expect(text).not.toMatch(/^oz0_calls_total\{[^}]*outcome="busy"\}/m);
    expect(text).toMatch(/^oz0_cancel_to_stopped_seconds_count\{tool="ledger.charge",cause="cancelled"\} 1$/m);
    expect(text).toMatch(/^oz0_policy_refusals_total\{tool="ledger.refund",server="ledger",tenant="acme"\} 1$/m);
    expect(text).toMatch(/^oz0_busy_wait_seconds_sum\{tool="ledger.charge"\} 1.5$/m);
    expect(text).toMatch(/^oz0_calls_running 0$/m);
    expect(text).toMatch(/^oz0_slots_free 4$/m);
    expect(text).toMatch(/^oz0_sandboxes_stopped_total\{kind="server",name="files",reason="limit"\} 1$/m);
    expect(text).toMatch(/^oz0_sandboxes_running 0$/m);
    expect(text).toMatch(/^oz0_sessions_live 1$/m);
    let promtool: string | undefined;
    try {
      promtool = execFileSync('sh', ['-c', 'command -v promtool'], { encoding: 'utf8' }).trim();
    } catch {
      promtool = undefined;
    }
    // The integration test (observability.test.ts) requires it; here it is checked where it is installed.
    if (promtool) expect(execFileSync(promtool, ['check', 'metrics'], { input: text, encoding: 'utf8' })).toBe('');
  });
});

describe('O4: log lines carry the current span', () => {
  function capture() {
    const lines: string[] = [];
    const destination: pino.DestinationStream = { write: (line: string) => void lines.push(line) };
    return { logger: createLogger({ destination }), lines };
  }

  test('O4: inside a span, trace_id and span_id are the span’s; outside, neither is there', () => {
    const manager = new AsyncLocalStorageContextManager().enable();
    context.setGlobalContextManager(manager);
    try {
      const tracer = new BasicTracerProvider().getTracer('test');
      const { logger, lines } = capture();
      const span = tracer.startSpan('a call');
      context.with(trace.setSpan(ROOT_CONTEXT, span), () => logger.info('inside'));
      span.end();
      logger.info('outside');
      const [inside, outside] = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(inside).toMatchObject({ trace_id: span.spanContext().traceId, span_id: span.spanContext().spanId });
      expect(outside.trace_id).toBeUndefined();
      expect(outside.span_id).toBeUndefined();
    } finally {
      context.disable();
    }
  });
});
