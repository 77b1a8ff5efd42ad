/**
 * A process's last words (STYLE "Failures say why"): its stderr's last lines, bounded and with its secrets cut out,
 * and how it ended, in words. The integration tests (test/integration/last-words.test.ts) read them from real
 * processes; here, the rules on a stream of their own.
 */
import { PassThrough, Readable } from 'node:stream';
import {
  LOGGED_STDERR_BYTES,
  LOGGED_STDERR_LINES,
  StderrTail,
  endedWhy,
  sandboxHint,
  saying,
  withLastWords,
} from '../../common/last-words';
import type { StderrDropped } from '../../common/last-words';

function tailOf(chunks: string[], secrets: string[] = []) {
  const stream = new PassThrough();
  const logged: string[] = [];
  const tail = new StderrTail(stream, secrets, (line) => logged.push(line));
  for (const chunk of chunks) stream.write(chunk);
  return { tail, logged, stream };
}

test.each([
  ['nothing', [], ''],
  ['one line', ['fatal: no config\n'], 'fatal: no config'],
  ['an unfinished last line', ['starting\nfatal: no con', 'fig'], 'starting | fatal: no config'],
  ['lines split across chunks, CRLF, blank lines', ['a\r\n\n  \nb', '\r\nc\n'], 'a | b | c'],
  [
    'a traceback, its indent trimmed',
    ['Traceback:\n  File "x.py", line 1\n    import y\n'],
    'Traceback: | File "x.py", line 1 | import y',
  ],
  [
    'only the last 10 lines',
    [Array.from({ length: 25 }, (_, i) => `line ${i + 1}\n`).join('')],
    Array.from({ length: 10 }, (_, i) => `line ${i + 16}`).join(' | '),
  ],
])('its tail: %s', async (_what, chunks, expected) => {
  const { tail } = tailOf(chunks);
  await new Promise((resolve) => setImmediate(resolve));
  expect(tail.tail()).toBe(expected);
});

test('each quoted line is cut to 1,000 characters, and the quote to the last lines within 4,000', async () => {
  const { tail, logged } = tailOf([`${'a'.repeat(5000)}\n`, `${'b'.repeat(1500)}\n`.repeat(6), 'the end\n']);
  await new Promise((resolve) => setImmediate(resolve));
  const lines = tail.tail().split(' | ');
  expect(lines.at(-1)).toBe('the end');
  expect(lines.slice(0, -1)).toEqual(Array(3).fill(`${'b'.repeat(999)}…`));
  expect(tail.tail().length).toBeLessThanOrEqual(4000);
  // The log gets each line whole, up to 4,000 characters.
  expect(logged[0]).toHaveLength(4000);
});

test('a flood without a newline is kept to its end, never whole', async () => {
  const { tail } = tailOf(Array(100).fill('x'.repeat(64 * 1024)));
  await new Promise((resolve) => setImmediate(resolve));
  expect(tail.tail()).toBe(`${'x'.repeat(999)}…`);
});

test('every secret is cut out of the log and the quote, even split across chunks', async () => {
  const { tail, logged } = tailOf(['key sk-abc', 'def rejected\n', 'and tok-1 too'], ['sk-abcdef', 'tok-1', '']);
  await new Promise((resolve) => setImmediate(resolve));
  expect(logged).toEqual(['key [redacted] rejected']);
  expect(tail.tail()).toBe('key [redacted] rejected | and [redacted] too');
});

test('drained: at the stream’s end, or after a short wait when something holds it open', async () => {
  const { tail, stream } = tailOf(['last\n']);
  stream.end();
  await tail.drained();
  expect(tail.tail()).toBe('last');
  const open = tailOf([]);
  const started = Date.now();
  await open.tail.drained();
  expect(Date.now() - started).toBeGreaterThanOrEqual(900);
});

type Ended = Parameters<typeof endedWhy>[1];
const plain: Ended = { isolated: false, stoppedFor: () => undefined };
const sandbox: Ended = { isolated: true, stoppedFor: () => undefined };
const limited: Ended = { isolated: true, stoppedFor: () => 'its limit of 64 processes' };
test.each<[string, Parameters<typeof endedWhy>[0], Ended, string]>([
  ['an exit code', { code: 1, signal: null }, plain, 'exited with code 1'],
  ['a signal', { code: null, signal: 'SIGSEGV' }, plain, 'was killed by SIGSEGV'],
  ['a sandbox’s 128 + 9', { code: 137, signal: null }, sandbox, 'was killed by SIGKILL'],
  ['a plain process’s 137 (its own exit code)', { code: 137, signal: null }, plain, 'exited with code 137'],
  [
    'a limit',
    { code: null, signal: 'SIGKILL' },
    limited,
    'was stopped: its sandbox went past its limit of 64 processes',
  ],
])('how it ended: %s', (_what, exit, ended, why) => {
  expect(endedWhy(exit, ended).why).toBe(why);
});

test('the words after what was said; an error keeps its own as the cause', () => {
  expect(withLastWords('the server exited with code 1', 'boom')).toBe(
    'the server exited with code 1; its last words on stderr: boom',
  );
  expect(withLastWords('the server exited with code 1', '')).toBe('the server exited with code 1');
  expect(withLastWords('', 'boom')).toBe('its last words on stderr: boom');
  const closed = new Error('Connection closed');
  const said = saying(closed, 'the server exited with code 3') as Error;
  expect(said.message).toBe('Connection closed; the server exited with code 3');
  expect(said.cause).toBe(closed);
  expect(saying(closed, undefined)).toBe(closed);
});

describe('I10: what a tenant’s process puts in the node’s log is bounded', () => {
  /** Writes `lines` lines of `chars` characters through a StderrTail; what reached the log, and what was dropped. */
  async function through(lines: number, chars: number, bounded: boolean) {
    const stream = new PassThrough();
    const logged: string[] = [];
    let dropped: StderrDropped | undefined;
    new StderrTail(stream, [], (line) => logged.push(line), bounded ? (d) => (dropped = d) : undefined);
    const line = `${'x'.repeat(chars - 6)} end\n`;
    for (let i = 0; i < lines; i += 1000) stream.write(line.repeat(Math.min(1000, lines - i)));
    stream.end('the last words\n');
    await new Promise((r) => stream.once('close', r).once('end', r).resume());
    await new Promise((r) => setImmediate(r));
    return { logged, dropped, bytes: logged.reduce((n, l) => n + l.length, 0) };
  }

  test('64 MiB of stderr puts at most 1,000 lines and 256 KiB in the log; the rest is counted, with its last lines', async () => {
    const { logged, dropped, bytes } = await through(65_536, 1024, true);
    expect(logged.length).toBeLessThanOrEqual(LOGGED_STDERR_LINES);
    expect(bytes).toBeLessThanOrEqual(LOGGED_STDERR_BYTES + 4000);
    expect(dropped).toMatchObject({ lines: 65_537 - logged.length, last: expect.stringMatching(/the last words$/) });
    expect(dropped!.bytes).toBeGreaterThan(60 * 1024 * 1024);
  });

  test('the control: a bound it stays within logs every line, and an unbounded one (the operator’s plugin) logs all 64 MiB', async () => {
    const small = await through(100, 80, true);
    expect(small.logged).toHaveLength(101);
    expect(small.dropped).toBeUndefined();
    const all = await through(65_536, 1024, false);
    expect(all.logged).toHaveLength(65_537);
  });
});

describe('S2: a failed start says why', () => {
  test('the lines that name the error are quoted with the last ones, when the last ones no longer hold them', async () => {
    // A Node.js crash for a package the sandbox cannot see (14 lines; its cause at line 4).
    const crash = [
      'node:internal/modules/esm/resolve:946',
      '  throw new ERR_MODULE_NOT_FOUND(packageName, fileURLToPath(base), null);',
      '        ^',
      "Error [ERR_MODULE_NOT_FOUND]: Cannot find package '@modelcontextprotocol/sdk' imported from /srv/fs/dist/index.js",
      '    at packageResolve (node:internal/modules/esm/resolve:873:9)',
      '    at moduleResolve (node:internal/modules/esm/resolve:946:18)',
      '    at defaultResolve (node:internal/modules/esm/resolve:1188:11)',
      '    at ModuleLoader.defaultResolve (node:internal/modules/esm/loader:708:12)',
      '    at #cachedDefaultResolve (node:internal/modules/esm/loader:657:25)',
      '    at ModuleLoader.resolve (node:internal/modules/esm/loader:640:38)',
      '  {',
      "  code: 'ERR_MODULE_NOT_FOUND'",
      '}',
      'Node.js v20.20.2',
    ];
    const stream = Readable.from([`${crash.join('\n')}\n`]);
    const tail = new StderrTail(stream, [], () => undefined);
    await tail.drained();
    const said = tail.tail();
    expect(said.startsWith("Error [ERR_MODULE_NOT_FOUND]: Cannot find package '@modelcontextprotocol/sdk'")).toBe(true);
    expect(said).toContain(' | … | ');
    expect(said.endsWith('Node.js v20.20.2')).toBe(true);
    expect(sandboxHint(tail.text())).toMatch(/grant the folder its packages are in \(sandbox.read/);
  });

  test('words that name nothing a sandbox keeps get no hint; a short stderr is quoted as it is (the controls)', async () => {
    const tail = new StderrTail(Readable.from(['TypeError: x is not a function\nat main\n']), [], () => undefined);
    await tail.drained();
    expect(tail.tail()).toBe('TypeError: x is not a function | at main');
    expect(sandboxHint(tail.text())).toBeUndefined();
    expect(sandboxHint('getaddrinfo EAI_AGAIN registry.npmjs.org')).toMatch(/no network but/);
    expect(sandboxHint("PermissionError: [Errno 13] Permission denied: '/srv/data/memory.jsonl'")).toMatch(
      /writes only its own folder/,
    );
  });
});
