/**
 * What a call's three spans (its step, its attempt, its `tools/call`, with oz0's attributes) and their OTLP/protobuf
 * export cost the main thread alone, in a warm loop: the floor under observability's cost on a node (issue 36.2). And
 * what tracing's context manager costs every other `await` on that thread: a second AsyncLocalStorage beside the one
 * Temporal's activities already run in. `node dist/bench/spans.js` (after `npm run build`); spans go to an endpoint of
 * its own that drops them.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { SpanKind, SpanStatusCode, context, propagation, trace } from '@opentelemetry/api';
import { NodeSDK } from '@opentelemetry/sdk-node';
import { BatchSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { SpanAttr } from '../model/spans';

const attributes = (i: number) => ({
  [SpanAttr.job]: `job-${i}`,
  [SpanAttr.tenant]: 'acme',
  [SpanAttr.tool]: 'reader.echo',
  [SpanAttr.key]: `job-${i}/c1`,
  [SpanAttr.attempt]: 1,
  [SpanAttr.genAiToolName]: 'echo',
  [SpanAttr.genAiOperation]: 'execute_tool',
});

/** CPU µs per 1,000 awaits (half on a promise, half on the next turn of the loop) inside `run`. */
async function awaits(run: (fn: () => Promise<void>) => Promise<void>): Promise<number> {
  const work = async () => {
    for (let i = 0; i < 500; i++) {
      await Promise.resolve(i);
      await new Promise((resolve) => setImmediate(resolve));
    }
  };
  for (let i = 0; i < 20; i++) await run(work);
  const before = process.cpuUsage();
  for (let i = 0; i < 200; i++) await run(work);
  const used = process.cpuUsage(before);
  return (used.user + used.system) / 200;
}

async function main(): Promise<void> {
  // Temporal's activity context is an AsyncLocalStorage already; before the SDK below adds its own.
  const activity = new AsyncLocalStorage<object>();
  const plain = await awaits((fn) => activity.run({}, fn));
  const sink = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => res.writeHead(200).end());
  });
  await new Promise<void>((resolve) => sink.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(sink.address() as AddressInfo).port}/v1/traces`;
  const processor = new BatchSpanProcessor(new OTLPTraceExporter({ url }));
  const sdk = new NodeSDK({ spanProcessors: [processor], logRecordProcessors: [] });
  sdk.start();
  const tracer = trace.getTracer('oz0');
  const call = async (i: number) => {
    const step = tracer.startSpan('StartActivity:callTool', { attributes: attributes(i) });
    await context.with(trace.setSpan(context.active(), step), () =>
      tracer.startActiveSpan('RunActivity:callTool', async (attempt) => {
        attempt.setAttributes({ temporalActivityId: 'c1', temporalWorkflowId: `job-${i}`, ...attributes(i) });
        const mcp = tracer.startSpan('tools/call echo', {
          kind: SpanKind.CLIENT,
          attributes: { 'mcp.method.name': 'tools/call', 'network.transport': 'pipe', ...attributes(i) },
        });
        propagation.inject(trace.setSpan(context.active(), mcp), {});
        // The answer comes in a later turn of the event loop, as a server's does.
        await new Promise((resolve) => setImmediate(resolve));
        mcp.setAttributes({ 'jsonrpc.request.id': String(i), [SpanAttr.outcome]: 'ok' });
        mcp.end();
        attempt.setAttribute(SpanAttr.outcome, 'ok');
        attempt.setStatus({ code: SpanStatusCode.OK });
        attempt.end();
      }),
    );
    step.setStatus({ code: SpanStatusCode.OK });
    step.end();
  };
  for (let i = 0; i < 2000; i++) await call(i);
  await processor.forceFlush();
  const n = 5000;
  for (let round = 1; round <= 3; round++) {
    const before = process.cpuUsage();
    for (let i = 0; i < n; i++) await call(i);
    await processor.forceFlush();
    const used = process.cpuUsage(before);
    process.stdout.write(`round ${round}: ${((used.user + used.system) / n).toFixed(0)} µs of CPU a call\n`);
  }
  const key = Symbol('oz0');
  const traced = await awaits((fn) => activity.run({}, () => context.with(context.active().setValue(key, 1), fn)));
  process.stdout.write(
    `1,000 awaits: ${plain.toFixed(0)} µs of CPU in an activity's context, ${traced.toFixed(0)} with tracing's too\n`,
  );
  await sdk.shutdown();
  sink.close();
}

main().catch((err: unknown) => {
  process.stderr.write(`${String((err as Error).stack ?? err)}\n`);
  process.exit(1);
});
