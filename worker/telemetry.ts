/**
 * A node's telemetry (SPEC O1-O2): OpenTelemetry tracing, once per process, when the standard
 * `OTEL_EXPORTER_OTLP_*` variables say where to send spans; and the node's Prometheus endpoint, `/metrics`, when
 * `node.metricsPort` (or `OZ0_METRICS_PORT`) says where to serve it, carrying oz0's series and the Temporal SDK's.
 *
 * Tracing off, no OpenTelemetry SDK is loaded: the API's no-op tracer answers oz0's few span calls, the workflow
 * interceptors' spans go to a sink that drops them, and nothing is added to a request's `_meta`.
 */
import http from 'node:http';
import net from 'node:net';
import { z } from 'zod';
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import type { Resource } from '@opentelemetry/resources';
import type { NodeSDK } from '@opentelemetry/sdk-node';
// Types only: the packages themselves are loaded when tracing starts, never by a node that traces nothing.
import type * as SdkNode from '@opentelemetry/sdk-node';
import type * as SdkTraceBase from '@opentelemetry/sdk-trace-base';
import type * as Resources from '@opentelemetry/resources';
import type * as OtlpGrpc from '@opentelemetry/exporter-trace-otlp-grpc';
import type * as OtlpJson from '@opentelemetry/exporter-trace-otlp-http';
import type * as OtlpProto from '@opentelemetry/exporter-trace-otlp-proto';
import type * as TemporalOtel from '@temporalio/interceptors-opentelemetry';
import type * as Sampling from './sampling';
import type { InjectedSinks, TelemetryOptions, WorkerOptions } from '@temporalio/worker';
import type { WorkflowClientInterceptor } from '@temporalio/client';
import type { OpenTelemetrySinks } from '@temporalio/interceptors-opentelemetry';
import type { Logger } from '../common/logger';
import { SAMPLERS } from '../model/spans';
import type { SamplerChoice } from '../model/spans';
import { NodeMetrics } from '../activities/observe/metrics';
import { releaseLabels } from '../common/release';
import type { NodeRelease, Release } from '../common/release';

/** The standard variables oz0 reads itself; the exporters read the rest (headers, timeouts, certificates). */
const OtelEnvSchema = z.object({
  OTEL_SDK_DISABLED: z.enum(['true', 'false', '']).optional(),
  OTEL_TRACES_EXPORTER: z.string().optional(),
  OTEL_EXPORTER_OTLP_ENDPOINT: z.url().optional(),
  OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: z.url().optional(),
  OTEL_EXPORTER_OTLP_PROTOCOL: z.enum(['http/protobuf', 'http/json', 'grpc']).optional(),
  OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: z.enum(['http/protobuf', 'http/json', 'grpc']).optional(),
  OTEL_SERVICE_NAME: z.string().min(1).optional(),
  OTEL_TRACES_SAMPLER: z
    .enum(SAMPLERS, { error: `one of ${SAMPLERS.join(', ')} (the samplers OpenTelemetry's JavaScript SDK has)` })
    .optional(),
  OTEL_TRACES_SAMPLER_ARG: z.string().optional(),
});

/** A ratio sampler's argument: a probability from 0 to 1, as OpenTelemetry reads it. */
const RatioSchema = z.coerce.number({ error: 'a probability from 0 to 1' }).min(0).max(1);

export type OtlpProtocol = 'http/protobuf' | 'http/json' | 'grpc';

/**
 * Where spans go and which traces are kept, from the environment: undefined when tracing is off. A bad value is said,
 * naming the variable.
 */
export function tracingTarget(
  source: NodeJS.ProcessEnv = process.env,
): { protocol: OtlpProtocol; sampler: SamplerChoice } | undefined {
  const set = Object.fromEntries(Object.entries(source).filter(([k, v]) => k.startsWith('OTEL_') && v !== ''));
  const parsed = OtelEnvSchema.safeParse(set);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`${issue.path.join('.')}: ${issue.message}`);
  }
  const env = parsed.data;
  if (env.OTEL_SDK_DISABLED === 'true' || env.OTEL_TRACES_EXPORTER?.split(',').includes('none')) return undefined;
  if (!env.OTEL_EXPORTER_OTLP_ENDPOINT && !env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) return undefined;
  // OpenTelemetry's defaults: OTLP over http/protobuf; every trace a caller did not decide, each child as its parent.
  const name = env.OTEL_TRACES_SAMPLER ?? 'parentbased_always_on';
  let ratio = 1;
  if (name.endsWith('traceidratio') && env.OTEL_TRACES_SAMPLER_ARG !== undefined) {
    const parsed = RatioSchema.safeParse(env.OTEL_TRACES_SAMPLER_ARG);
    if (!parsed.success) throw new Error(`OTEL_TRACES_SAMPLER_ARG: ${parsed.error.issues[0].message}`);
    ratio = parsed.data;
  }
  return {
    protocol: env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ?? env.OTEL_EXPORTER_OTLP_PROTOCOL ?? 'http/protobuf',
    sampler: { name, ratio },
  };
}

interface Tracing {
  sdk: NodeSDK;
  processor: SpanProcessor;
  sampler: Sampling.JobTraceSampler;
  resource: Resource;
  protocol: OtlpProtocol;
  interceptors: typeof TemporalOtel;
}

let tracing: Tracing | null | undefined;

/**
 * Starts OpenTelemetry's Node SDK once per process when the environment asks for spans; undefined when it does not.
 * Its spans' resource names the release (`service.version`), as OpenTelemetry's conventions have it.
 */
export function startTracing(logger: Logger, release?: Release): Tracing | undefined {
  if (tracing !== undefined) return tracing ?? undefined;
  const target = tracingTarget();
  if (!target) {
    tracing = null;
    return undefined;
  }
  // Loaded only now: a node that traces nothing never loads the SDK.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { NodeSDK } = require('@opentelemetry/sdk-node') as typeof SdkNode;
  const { BatchSpanProcessor } = require('@opentelemetry/sdk-trace-base') as typeof SdkTraceBase;
  const { Resource } = require('@opentelemetry/resources') as typeof Resources;
  const exporter =
    target.protocol === 'grpc'
      ? new (require('@opentelemetry/exporter-trace-otlp-grpc') as typeof OtlpGrpc).OTLPTraceExporter()
      : target.protocol === 'http/json'
        ? new (require('@opentelemetry/exporter-trace-otlp-http') as typeof OtlpJson).OTLPTraceExporter()
        : new (require('@opentelemetry/exporter-trace-otlp-proto') as typeof OtlpProto).OTLPTraceExporter();
  const interceptors = require('@temporalio/interceptors-opentelemetry') as typeof TemporalOtel;
  const { JobTraceSampler } = require('./sampling') as typeof Sampling;
  /* eslint-enable @typescript-eslint/no-require-imports */
  const processor = new BatchSpanProcessor(exporter);
  const resource = new Resource({
    'service.name': process.env.OTEL_SERVICE_NAME ?? 'oz0',
    ...(release ? { 'service.version': release.name } : {}),
  });
  const sampler = new JobTraceSampler(target.sampler);
  const sdk = new NodeSDK({
    resource,
    sampler,
    spanProcessors: [processor],
    // oz0 logs through pino (O4 puts the trace's ids on its lines); no OTLP log exporter by default.
    logRecordProcessors: [],
  });
  sdk.start();
  tracing = { sdk, processor, sampler, resource, protocol: target.protocol, interceptors };
  logger.info({ protocol: target.protocol, sampler: target.sampler }, 'tracing: spans go out over OTLP');
  return tracing;
}

/** Whether this process exports spans (startTracing found where to send them). */
export function tracingOn(): boolean {
  return !!tracing;
}

/** Sends the spans still buffered (a node that stops, a test that reads them). */
export async function flushTracing(): Promise<void> {
  await tracing?.processor.forceFlush();
}

/**
 * What a worker that runs workflows and activities needs for tracing: Temporal's activity interceptors (each attempt
 * a span, child of its step's) and the sink the workflow interceptors' spans leave by (workflows/tracing.ts).
 */
export function tracingWorkerOptions(): Pick<WorkerOptions, 'interceptors' | 'sinks'> {
  if (!tracing) return { sinks: droppingSinks() };
  const otel = tracing.interceptors;
  return {
    interceptors: {
      activity: [
        (ctx) => ({
          inbound: new otel.OpenTelemetryActivityInboundInterceptor(ctx),
          outbound: new otel.OpenTelemetryActivityOutboundInterceptor(ctx),
        }),
      ],
    },
    sinks: { exporter: sampledExporter(tracing) },
  };
}

/**
 * The sink the workflow's spans leave by: Temporal's exporter, after the node's sampler. A trace a job began is kept
 * or dropped by its id (./sampling.ts); a caller's trace by its sampled flag, which the span processor reads.
 */
function sampledExporter({
  interceptors,
  processor,
  resource,
  sampler,
}: Tracing): InjectedSinks<OpenTelemetrySinks>['exporter'] {
  const { export: exported } = interceptors.makeWorkflowExporter(processor, resource);
  return {
    export: {
      ...exported,
      fn: (info, spans) =>
        exported.fn(
          info,
          spans.filter((s) => sampler.keepsSpan(s.spanContext)),
        ),
    },
  };
}

/** A client that starts jobs inside the caller's trace (O2): its span's context goes in the workflow's headers. */
export function tracingClientInterceptors(): WorkflowClientInterceptor[] {
  if (!tracing) return [];
  return [new tracing.interceptors.OpenTelemetryWorkflowClientInterceptor()];
}

/** With tracing off the workflow interceptors still hand their spans to this sink: dropped, never exported. */
function droppingSinks(): InjectedSinks<OpenTelemetrySinks> {
  return { exporter: { export: { fn: () => undefined } } };
}

// ---- metrics ----

/** The Temporal runtime's own Prometheus endpoint, on loopback only: a node's /metrics carries its text. */
let runtimeMetricsPort: number | undefined;

/** A free loopback port (bound, then closed) for the runtime's exporter, which needs its address up front. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * The runtime's telemetry options for metrics: Prometheus on a private loopback port, when this node serves
 * `/metrics`. Picked before the runtime is installed (once per process): a process whose first node serves no
 * metrics has no SDK metrics.
 */
export async function prepareRuntimeMetrics(metricsPort: number | undefined): Promise<void> {
  if (metricsPort === undefined || runtimeMetricsPort !== undefined) return;
  runtimeMetricsPort = await freePort();
}

/**
 * For Runtime.install's telemetryOptions: where the SDK's metrics go (nowhere when no node serves /metrics), each
 * series with the release's labels (issue 56), as oz0's own carry them.
 */
export function runtimeMetricsOptions(release?: NodeRelease): Pick<TelemetryOptions, 'metrics'> {
  if (runtimeMetricsPort === undefined) return {};
  return {
    metrics: {
      ...(release ? { globalTags: releaseLabels(release) } : {}),
      prometheus: {
        bindAddress: `127.0.0.1:${runtimeMetricsPort}`,
        countersTotalSuffix: true,
        unitSuffix: true,
        useSecondsForDurations: true,
      },
    },
  };
}

/** One kept-alive connection to the runtime's endpoint: a scrape costs a request, not a connection and fetch's streams. */
const runtimeAgent = new http.Agent({ keepAlive: true, maxSockets: 1 });

/**
 * The SDK's series as its runtime serves them; empty when it has none (or is slow: a scrape never waits long). By
 * node:http, not fetch: fetch's WHATWG streams were most of a scrape's 2.4 ms of CPU (issue 36.2).
 */
function runtimeMetricsText(): Promise<string> {
  const port = runtimeMetricsPort;
  if (port === undefined) return Promise.resolve('');
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path: '/metrics', agent: runtimeAgent, timeout: 2000 }, (res) => {
      if (res.statusCode !== 200) {
        res.resume();
        resolve('');
        return;
      }
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
      res.on('error', () => resolve(''));
    });
    req.on('timeout', () => req.destroy());
    req.on('error', () => resolve(''));
  });
}

export interface MetricsServer {
  metrics: NodeMetrics;
  /** Where /metrics is served (the port picked when the config said 0). */
  url: string;
  close(): Promise<void>;
}

/** O1: serves the node's series and the Temporal SDK's at `http://<host>:<port>/metrics`. */
export async function serveMetrics(opts: {
  port: number;
  host: string;
  slots: number;
  logger: Logger;
  /** The node's name and release: labels of every series it serves (issue 56). */
  node: string;
  release: NodeRelease;
}): Promise<MetricsServer> {
  const metrics = new NodeMetrics(opts.slots, { node: opts.node, release: opts.release });
  const server = http.createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('oz0 serves /metrics\n');
      return;
    }
    Promise.all([metrics.text(), runtimeMetricsText()])
      .then(([own, sdk]) => {
        res.writeHead(200, { 'content-type': metrics.contentType });
        res.end(sdk ? `${own}\n${sdk}` : own);
      })
      .catch((err: unknown) => {
        opts.logger.warn({ err: (err as Error).message }, 'metrics: a scrape failed');
        res.writeHead(500).end();
      });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host, () => resolve());
  });
  const { port } = server.address() as net.AddressInfo;
  const shown = opts.host === '0.0.0.0' || opts.host === '::' ? '127.0.0.1' : opts.host;
  const url = `http://${shown.includes(':') ? `[${shown}]` : shown}:${port}/metrics`;
  return {
    metrics,
    url,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
