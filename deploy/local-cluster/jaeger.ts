/**
 * Jaeger, the tracing backend the docs and `npm run cluster -- --observe` use (SPEC O2), built from its Go module at
 * a pinned version into `.tools/jaeger/<version>/jaeger` and reused when present. Its module has replace directives,
 * so `go install pkg@version` refuses it: it is built as a tool of a module of its own (`go get -tool`), as the
 * library's package list says. `npm run jaeger:install` prints the binary's path.
 *
 * Jaeger 1.75.0 is the approved release; the newer versions the proxy serves are not.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../../common/paths';
import { freePort } from '../../worker/dev-server';
import { goIn } from './go-tools';

export const JAEGER_VERSION = '1.75.0';
const PACKAGE = 'github.com/jaegertracing/jaeger/cmd/jaeger';

/** The Jaeger binary, built once (a few minutes on a fresh machine); `say` tells a person what is going on. */
export async function ensureJaeger(root = projectRoot(), say: (line: string) => void = () => undefined) {
  const home = path.join(root, '.tools', 'jaeger', JAEGER_VERSION);
  const bin = path.join(home, 'jaeger');
  if (fs.existsSync(bin)) return bin;
  const module = path.join(home, 'module');
  fs.mkdirSync(module, { recursive: true });
  const logFile = path.join(home, 'build.log');
  say(`building Jaeger ${JAEGER_VERSION} with Go; a few minutes on a fresh machine, output in ${logFile}`);
  if (!fs.existsSync(path.join(module, 'go.mod'))) await goIn(['mod', 'init', 'oz0.local/jaeger'], module, logFile);
  await goIn(['get', '-tool', `${PACKAGE}@v${JAEGER_VERSION}`], module, logFile);
  await goIn(['build', '-o', bin, PACKAGE], module, logFile);
  return bin;
}

export interface RunningJaeger {
  /** For OTEL_EXPORTER_OTLP_ENDPOINT: OTLP/HTTP and OTLP/gRPC. */
  otlpHttp: string;
  otlpGrpc: string;
  /** Its query API (`/api/services`, `/api/traces`): the binary built from the module has no web UI. */
  queryUrl: string;
  stop(): Promise<void>;
}

/**
 * Starts Jaeger on free ports of 127.0.0.1, traces in memory: OTLP in (both transports), the query API out, nothing
 * else (its default config binds a dozen fixed ports, which a second Jaeger on the machine would find taken).
 */
export async function startJaeger(bin: string, dir: string): Promise<RunningJaeger> {
  fs.mkdirSync(dir, { recursive: true });
  const [grpc, http, query, queryGrpc] = [await freePort(), await freePort(), await freePort(), await freePort()];
  const config = [
    'service:',
    '  extensions: [jaeger_storage, jaeger_query]',
    '  pipelines:',
    '    traces: { receivers: [otlp], processors: [batch], exporters: [jaeger_storage_exporter] }',
    '  telemetry: { metrics: { level: none }, logs: { level: warn } }',
    'extensions:',
    '  jaeger_query:',
    '    storage: { traces: memstore }',
    `    http: { endpoint: 127.0.0.1:${query} }`,
    `    grpc: { endpoint: 127.0.0.1:${queryGrpc} }`,
    '  jaeger_storage:',
    '    backends: { memstore: { memory: { max_traces: 100000 } } }',
    'receivers:',
    '  otlp:',
    '    protocols:',
    `      grpc: { endpoint: 127.0.0.1:${grpc} }`,
    `      http: { endpoint: 127.0.0.1:${http} }`,
    'processors: { batch: {} }',
    'exporters: { jaeger_storage_exporter: { trace_storage: memstore } }',
  ].join('\n');
  const file = path.join(dir, 'jaeger.yaml');
  fs.writeFileSync(file, `${config}\n`);
  const log = fs.openSync(path.join(dir, 'jaeger.log'), 'a');
  const proc = spawn(bin, ['--config', file], { stdio: ['ignore', log, log], detached: true });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGTERM');
    await exited;
  };
  const queryUrl = `http://127.0.0.1:${query}`;
  const deadline = Date.now() + 30_000;
  while (!(await fetch(`${queryUrl}/api/services`).catch(() => undefined))?.ok) {
    if (Date.now() > deadline || proc.exitCode !== null) {
      await stop();
      throw new Error(`Jaeger did not start (see ${path.join(dir, 'jaeger.log')})`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return { otlpHttp: `http://127.0.0.1:${http}`, otlpGrpc: `http://127.0.0.1:${grpc}`, queryUrl, stop };
}

if (require.main === module) {
  ensureJaeger(projectRoot(), (line) => process.stderr.write(`${line}\n`))
    .then((bin) => process.stdout.write(`${bin}\n`))
    .catch((err: unknown) => {
      console.error((err as Error).message);
      process.exit(1);
    });
}
