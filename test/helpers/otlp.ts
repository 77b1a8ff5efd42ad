/**
 * A real OTLP trace receiver on 127.0.0.1, for the tests of O2-O3: `POST /v1/traces` over HTTP in both encodings
 * (http/json and http/protobuf) and the gRPC `TraceService/Export`, each decoded as a collector would (the protobuf by
 * OpenTelemetry's own generated schema). It keeps every span it was sent, with where it came from, so a test asserts on
 * what crossed the wire — not on what the SDK meant to send.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import * as grpc from '@grpc/grpc-js';

// OpenTelemetry's generated protobuf schema of OTLP (protobufjs static code).
// eslint-disable-next-line @typescript-eslint/no-require-imports
const root = require('@opentelemetry/otlp-transformer/build/src/generated/root') as {
  opentelemetry: {
    proto: {
      collector: {
        trace: { v1: { ExportTraceServiceRequest: ProtoType; ExportTraceServiceResponse: ProtoType } };
      };
    };
  };
};
interface ProtoType {
  decode(buf: Uint8Array): unknown;
  toObject(msg: unknown, opts: Record<string, unknown>): Record<string, unknown>;
  encode(msg: unknown): { finish(): Uint8Array };
  create(props: Record<string, unknown>): unknown;
}
const { ExportTraceServiceRequest: Request, ExportTraceServiceResponse: Response } =
  root.opentelemetry.proto.collector.trace.v1;

export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  service: string;
  /** Its resource's `service.version`: the release of the node that made it (issue 56). */
  serviceVersion: string;
  attributes: Record<string, string | number | boolean>;
  status: { code: number; message?: string };
  /** How it came: `http/json`, `http/protobuf` or `grpc`. */
  via: string;
}

export interface OtlpReceiver {
  /** For OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:<port>` (HTTP) and the gRPC one. */
  httpEndpoint: string;
  grpcEndpoint: string;
  spans: ReceivedSpan[];
  close(): Promise<void>;
}

type AnyValue = { stringValue?: string; intValue?: number | string; boolValue?: boolean; doubleValue?: number };

function valueOf(v: AnyValue | undefined): string | number | boolean {
  if (!v) return '';
  if (v.stringValue !== undefined) return v.stringValue;
  if (v.boolValue !== undefined) return v.boolValue;
  if (v.intValue !== undefined) return Number(v.intValue);
  if (v.doubleValue !== undefined) return v.doubleValue;
  return JSON.stringify(v);
}

function attrs(list: Array<{ key: string; value?: AnyValue }> | undefined): Record<string, string | number | boolean> {
  return Object.fromEntries((list ?? []).map((a) => [a.key, valueOf(a.value)]));
}

/** Ids come hex in OTLP/JSON, base64 from protobufjs' toObject(bytes: String): both become hex. */
function hexId(id: unknown, fromBase64: boolean): string {
  if (typeof id !== 'string' || id === '') return '';
  return fromBase64 ? Buffer.from(id, 'base64').toString('hex') : id.toLowerCase();
}

interface ExportRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: Array<{ key: string; value?: AnyValue }> };
    scopeSpans?: Array<{
      spans?: Array<{
        traceId?: string;
        spanId?: string;
        parentSpanId?: string;
        name?: string;
        kind?: number;
        attributes?: Array<{ key: string; value?: AnyValue }>;
        status?: { code?: number; message?: string };
      }>;
    }>;
  }>;
}

function collect(into: ReceivedSpan[], req: ExportRequest, via: string, base64Ids: boolean): void {
  for (const rs of req.resourceSpans ?? []) {
    const resource = attrs(rs.resource?.attributes);
    const service = String(resource['service.name'] ?? '');
    const serviceVersion = String(resource['service.version'] ?? '');
    for (const ss of rs.scopeSpans ?? []) {
      for (const s of ss.spans ?? []) {
        into.push({
          traceId: hexId(s.traceId, base64Ids),
          spanId: hexId(s.spanId, base64Ids),
          parentSpanId: hexId(s.parentSpanId, base64Ids),
          name: s.name ?? '',
          kind: Number(s.kind ?? 0),
          service,
          serviceVersion,
          attributes: attrs(s.attributes),
          status: { code: Number(s.status?.code ?? 0), message: s.status?.message },
          via,
        });
      }
    }
  }
}

function decodeProto(buf: Uint8Array): ExportRequest {
  return Request.toObject(Request.decode(buf), { longs: Number, enums: Number, bytes: String }) as ExportRequest;
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const spans: ReceivedSpan[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.method !== 'POST' || req.url !== '/v1/traces') {
        res.writeHead(404).end();
        return;
      }
      const body = Buffer.concat(chunks);
      try {
        if ((req.headers['content-type'] ?? '').includes('json')) {
          collect(spans, JSON.parse(body.toString('utf8')) as ExportRequest, 'http/json', false);
          res.writeHead(200, { 'content-type': 'application/json' }).end('{}');
        } else {
          collect(spans, decodeProto(body), 'http/protobuf', true);
          res.writeHead(200, { 'content-type': 'application/x-protobuf' });
          res.end(Buffer.from(Response.encode(Response.create({})).finish()));
        }
      } catch (err) {
        res.writeHead(400).end(String(err));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const grpcServer = new grpc.Server();
  grpcServer.addService(
    {
      Export: {
        path: '/opentelemetry.proto.collector.trace.v1.TraceService/Export',
        requestStream: false,
        responseStream: false,
        requestSerialize: (m: unknown) => Buffer.from(Request.encode(m).finish()),
        requestDeserialize: (b: Buffer) => decodeProto(b),
        responseSerialize: () => Buffer.from(Response.encode(Response.create({})).finish()),
        responseDeserialize: (b: Buffer) => Response.decode(b),
      },
    },
    {
      Export: (call: grpc.ServerUnaryCall<ExportRequest, unknown>, callback: grpc.sendUnaryData<unknown>) => {
        collect(spans, call.request, 'grpc', true);
        callback(null, {});
      },
    },
  );
  const grpcPort = await new Promise<number>((resolve, reject) =>
    grpcServer.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, port) =>
      err ? reject(err) : resolve(port),
    ),
  );
  return {
    httpEndpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    grpcEndpoint: `http://127.0.0.1:${grpcPort}`,
    spans,
    async close() {
      grpcServer.forceShutdown();
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    },
  };
}
