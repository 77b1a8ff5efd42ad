import type pino from 'pino';
import { createLogger, TemporalLevelFilter, TemporalPinoLogger } from '../../common/logger';
import type { Logger } from '../../common/logger';

/** A logger whose every line is kept in `lines`, so a test can read exactly what would reach the log. */
function capture(level = 'info'): { logger: Logger; lines: string[]; text: () => string } {
  const lines: string[] = [];
  const destination: pino.DestinationStream = { write: (line: string) => void lines.push(line) };
  return { logger: createLogger({ level, destination }), lines, text: () => lines.join('') };
}

const SECRET = 's3cret-value-9f2c';

/** Shapes a secret may be logged in, each with the secret at a path the redact list covers. */
const covered: Array<[string, Record<string, unknown>]> = [
  ['a server and its headers', { server: 'search', headers: { Authorization: `Bearer ${SECRET}` } }],
  ['an environment', { env: { TOKEN: SECRET } }],
  ['a token', { token: SECRET }],
  ['an apiKey', { apiKey: SECRET }],
  ['a password', { password: SECRET }],
  ['a secret', { secret: SECRET }],
  ['an Authorization value', { Authorization: `Bearer ${SECRET}` }],
  ['an authorization value', { authorization: `Bearer ${SECRET}` }],
  ['a request with headers', { request: { headers: { 'x-api-key': SECRET } } }],
  ['a request with an authorization', { request: { authorization: SECRET } }],
  ['a server with an env', { server: { name: 'files', env: { ROOT: SECRET } } }],
  ['a server with a token', { connection: { token: SECRET } }],
  ['a config as logged whole', { servers: { search: { url: 'http://x/mcp', headers: { A: SECRET } } } }],
  ['servers with env, as logged whole', { servers: { files: { command: 'node', env: { K: SECRET } } } }],
  ['an array of servers with headers', { servers: [{ headers: { A: SECRET } }] }],
];

describe('Words: secrets never logged', () => {
  test.each(covered)('Words: %s is logged as [redacted]', (_what, obj) => {
    const { logger, text } = capture();
    logger.info(obj, 'connecting');
    expect(text()).not.toContain(SECRET);
    expect(text()).toContain('[redacted]');
    expect(text()).toContain('connecting');
  });

  test('Words: only the secret is redacted, the rest of the line stays', () => {
    const { logger, lines } = capture();
    logger.info({ server: 'search', headers: { Authorization: `Bearer ${SECRET}` } }, 'open');
    expect(JSON.parse(lines[0])).toMatchObject({ name: 'oz0', server: 'search', headers: '[redacted]', msg: 'open' });
  });

  test.each<[string, (logger: Logger) => void]>([
    ['a child logger binding', (logger) => logger.child({ headers: { A: SECRET } }).info('from a child')],
    ['a child logger line', (logger) => logger.child({ component: 'pool' }).info({ env: { K: SECRET } }, 'child')],
    ['warn', (logger) => logger.warn({ token: SECRET }, 'warned')],
    ['error with an err', (logger) => logger.error({ err: new Error('boom'), headers: { A: SECRET } }, 'failed')],
    ['the Temporal adapter', (logger) => new TemporalPinoLogger(logger).warn('temporal', { headers: { A: SECRET } })],
    [
      'the Temporal adapter, nested',
      (logger) => new TemporalPinoLogger(logger).info('t', { activity: { env: { SECRET } } }),
    ],
  ])('Words: a secret logged through %s is redacted', (_how, log) => {
    const { logger, text } = capture();
    log(logger);
    expect(text()).not.toContain(SECRET);
    expect(text()).toContain('[redacted]');
  });

  test.each<[string, Record<string, unknown>]>([
    ['a config under a key, with server headers', { config: { servers: { s: { headers: { A: SECRET } } } } }],
    ['a config under a key, with a server env', { config: { servers: { files: { env: { TOKEN: SECRET } } } } }],
    ['a token two levels down', { call: { connection: { token: SECRET } } }],
  ])('Words: %s is logged as [redacted]', (_what, obj) => {
    const { logger, text } = capture();
    logger.info(obj, 'loaded');
    expect(text()).not.toContain(SECRET);
    expect(text()).toContain('[redacted]');
  });
});

test('the Temporal adapter keeps the SDK’s levels, and logs its warnings about workers with no workflows or activities at debug', () => {
  const { logger, lines } = capture('debug');
  const temporal = new TemporalPinoLogger(logger);
  temporal.warn('No activities registered, not polling for activity tasks', { taskQueue: 'oz0-policy' });
  temporal.warn('No workflows registered, not polling for workflow tasks', { taskQueue: 'oz0/node/a' });
  temporal.warn('Workflow task failed');
  temporal.error('boom');
  temporal.trace('not shown at debug');
  expect(lines.map((l) => JSON.parse(l) as { level: number; msg: string }).map((l) => [l.level, l.msg])).toEqual([
    [20, 'No activities registered, not polling for activity tasks'],
    [20, 'No workflows registered, not polling for workflow tasks'],
    [40, 'Workflow task failed'],
    [50, 'boom'],
  ]);
});

describe("Temporal's worker lines at oz0's level (issue 36.2)", () => {
  it('hands on only what the logger would write, and the collector its flush and close', () => {
    const { logger, lines } = capture('info');
    const to = new TemporalPinoLogger(logger);
    const handed: string[] = [];
    const calls: string[] = [];
    const collector = {
      log: (level: string, message: string) => {
        handed.push(`${level} ${message}`);
        to.log(level as 'INFO', message);
      },
      trace() {},
      debug() {},
      info() {},
      warn() {},
      error() {},
      flush: () => void calls.push('flush'),
      close: () => void calls.push('close'),
    };
    const filtered = new TemporalLevelFilter(collector, to);
    filtered.trace('Got activity task');
    filtered.debug('Activity started');
    filtered.info('Worker state changed');
    filtered.warn('Activity failed');
    filtered.flush();
    filtered.close();
    expect(handed).toEqual(['INFO Worker state changed', 'WARN Activity failed']);
    expect(lines.map((l) => (JSON.parse(l) as { msg: string }).msg)).toEqual([
      'Worker state changed',
      'Activity failed',
    ]);
    expect(calls).toEqual(['flush', 'close']);
    // A logger at trace hands on everything.
    const all = new TemporalLevelFilter(collector, new TemporalPinoLogger(capture('trace').logger));
    handed.length = 0;
    all.trace('Got activity task');
    expect(handed).toEqual(['TRACE Got activity task']);
  });
});
