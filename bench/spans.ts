/**
 * What a call's three spans (its step, its attempt, its `tools/call`, with oz0's attributes) and their OTLP/protobuf
 * export cost the main thread alone, in a warm loop: the floor under observability's cost on a node (issue 36.2).
 * `node dist/bench/spans.js` (after `npm run build`); spans go to an endpoint of its own that drops them.
 */
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

async function main(): Promise<void> {
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
  await sdk.shutdown();
  sink.close();
}

main().catch((err: unknown) => {
  process.stderr.write(`${String((err as Error).stack ?? err)}\n`);
  process.exit(1);
});
