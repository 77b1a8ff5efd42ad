/**
 * Structured logs through pino, with secrets redacted: header values, server environments and tokens never
 * reach a log line. Temporal's runtime and worker log through the same logger.
 */
import pino from 'pino';
import { isSpanContextValid, trace } from '@opentelemetry/api';
import type { Logger as TemporalLogger, LogLevel, LogMetadata } from '@temporalio/common';
import { heardTaskFailure } from './task-failures';

/** Keys whose values never reach a log, at any depth: config secrets and anything that looks like one. */
export const SECRET_KEYS = new Set([
  'headers',
  'env',
  'authorization',
  'token',
  'apikey',
  'api_key',
  'password',
  'secret',
  'cookie',
  'set-cookie',
]);

const CENSOR = '[redacted]';
const MAX_DEPTH = 12;

/** A copy of a log object with every secret-named key's value replaced, however deep it sits. */
export function redactSecrets(value: unknown, depth = 0, seen = new WeakSet<object>()): unknown {
  if (!value || typeof value !== 'object' || value instanceof Error) return value;
  if (depth > MAX_DEPTH || seen.has(value)) return '[…]';
  seen.add(value);
  if (Array.isArray(value)) return value.map((item) => redactSecrets(item, depth + 1, seen));
  const out: Record<string, unknown> = {};
  for (const [key, inner] of Object.entries(value)) {
    out[key] = SECRET_KEYS.has(key.toLowerCase()) ? CENSOR : redactSecrets(inner, depth + 1, seen);
  }
  return out;
}

export type Logger = pino.Logger;

/** O4: the current span's ids on each line logged inside it; nothing when no span is current (tracing off). */
export function traceIds(): { trace_id?: string; span_id?: string } {
  const span = trace.getActiveSpan();
  if (!span) return {};
  const ids = span.spanContext();
  return isSpanContextValid(ids) ? { trace_id: ids.traceId, span_id: ids.spanId } : {};
}

/** The process's logger: JSON to stderr (stdout stays for the CLI's output), level from OZ0_LOG_LEVEL. */
export function createLogger(opts: { level?: string; destination?: pino.DestinationStream } = {}): Logger {
  return pino(
    {
      name: 'oz0',
      level: opts.level ?? process.env.OZ0_LOG_LEVEL ?? 'info',
      mixin: traceIds,
      // pino's own redact takes fixed paths; secrets can sit at any depth (a whole config logged), so walk.
      formatters: {
        log: (object) => redactSecrets(object) as Record<string, unknown>,
      },
      // A child logger's bindings skip the log formatter but pass through serializers, key by key.
      serializers: Object.fromEntries([...SECRET_KEYS, 'Authorization', 'Cookie'].map((key) => [key, () => CENSOR])),
    },
    opts.destination ?? pino.destination(2),
  );
}

/** SDK warnings about what oz0 does on purpose (a node's own queue runs no workflows, the policy queue no
 * activities): logged at debug. */
const INTENDED = [/^No activities registered/, /^No workflows registered/];

/**
 * An activity that failed on purpose with one of oz0's own failure types (refused, killed, cancelled by its session,
 * busy, …): the job's trace says why; the worker's "Activity failed" warning would only repeat it.
 */
function deliberate(meta: LogMetadata | undefined): boolean {
  const type = (meta?.error as { type?: unknown } | undefined)?.type;
  return typeof type === 'string' && type.startsWith('Oz0');
}

const METHODS = { TRACE: 'trace', DEBUG: 'debug', INFO: 'info', WARN: 'warn', ERROR: 'error' } as const;

/** Temporal's Logger interface: a method per level, each a `log` at that level. */
abstract class ByLevel implements TemporalLogger {
  abstract log(level: LogLevel, message: string, meta?: LogMetadata): void;
  trace(message: string, meta?: LogMetadata): void {
    this.log('TRACE', message, meta);
  }
  debug(message: string, meta?: LogMetadata): void {
    this.log('DEBUG', message, meta);
  }
  info(message: string, meta?: LogMetadata): void {
    this.log('INFO', message, meta);
  }
  warn(message: string, meta?: LogMetadata): void {
    this.log('WARN', message, meta);
  }
  error(message: string, meta?: LogMetadata): void {
    this.log('ERROR', message, meta);
  }
}

/** Adapts pino to the Logger interface of Temporal's runtime and workers. */
export class TemporalPinoLogger extends ByLevel {
  constructor(private readonly logger: Logger) {
    super();
  }

  log(level: LogLevel, message: string, meta?: LogMetadata): void {
    const method =
      (level === 'WARN' && (INTENDED.some((re) => re.test(message)) || deliberate(meta))) ||
      // D3: a workflow task that fails the same way on every try is said once, by oz0 (worker/stuck.ts).
      heardTaskFailure(message, meta) === 'quiet'
        ? 'debug'
        : (METHODS[level] ?? 'info');
    this.logger[method](meta ?? {}, message);
  }

  /** Whether a line at `level` can reach the log at all (a WARN may still go to debug, above). */
  enabled(level: LogLevel): boolean {
    return this.logger.isLevelEnabled(METHODS[level] ?? 'info');
  }
}

/**
 * Temporal's logger as its workers see it, handing on only the lines oz0's logger may write. Where core's own logs
 * are forwarded, the runtime gives workers a collector that takes every line at TRACE, stamps it with a native call,
 * buffers it and hands it to oz0's logger 100 ms later, which drops every line below its level (info by default):
 * a dozen TRACE and DEBUG lines for each call (issue 36.2). `flush` and `close` are the collector's, which the runtime
 * calls at its end.
 */
export class TemporalLevelFilter extends ByLevel {
  constructor(
    private readonly inner: TemporalLogger & { flush?(): void; close?(): void },
    private readonly to: TemporalPinoLogger,
  ) {
    super();
  }

  log(level: LogLevel, message: string, meta?: LogMetadata): void {
    if (this.to.enabled(level)) this.inner.log(level, message, meta);
  }
  flush(): void {
    this.inner.flush?.();
  }
  close(): void {
    this.inner.close?.();
  }
}
