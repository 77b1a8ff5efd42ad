/**
 * Structured logs through pino, with secrets redacted: header values, server environments and tokens never
 * reach a log line. Temporal's runtime and worker log through the same logger.
 */
import pino from 'pino';
import type { Logger as TemporalLogger, LogLevel, LogMetadata } from '@temporalio/common';

/** Paths whose values never reach a log: config secrets and anything that looks like one. */
export const REDACT_PATHS = [
  'headers',
  '*.headers',
  '*.*.headers',
  'env',
  '*.env',
  '*.*.env',
  'authorization',
  '*.authorization',
  'Authorization',
  '*.Authorization',
  'token',
  '*.token',
  'apiKey',
  '*.apiKey',
  'password',
  '*.password',
  'secret',
  '*.secret',
];

export type Logger = pino.Logger;

/** The process's logger: JSON to stderr (stdout stays for the CLI's output), level from OZ0_LOG_LEVEL. */
export function createLogger(opts: { level?: string; destination?: pino.DestinationStream } = {}): Logger {
  return pino(
    {
      name: 'oz0',
      level: opts.level ?? process.env.OZ0_LOG_LEVEL ?? 'info',
      redact: { paths: REDACT_PATHS, censor: '[redacted]' },
    },
    opts.destination ?? pino.destination(2),
  );
}

/** Adapts pino to the Logger interface of Temporal's runtime and workers. */
export class TemporalPinoLogger implements TemporalLogger {
  constructor(private readonly logger: Logger) {}

  log(level: LogLevel, message: string, meta?: LogMetadata): void {
    const method =
      level === 'TRACE'
        ? 'trace'
        : level === 'DEBUG'
          ? 'debug'
          : level === 'WARN'
            ? 'warn'
            : level === 'ERROR'
              ? 'error'
              : 'info';
    this.logger[method](meta ?? {}, message);
  }
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
