/**
 * `oz0 plugin test`'s listing checks ("Words": hints, honours the key; P3 tokens; P6 resume on a plugin server) and
 * the drill file's schema.
 */
import type { Tool } from '@modelcontextprotocol/client';
import { checkListing, checkProgress, isKeyedWrite, listedFunctions } from '../../plugin/drill/listing-checks';
import { DrillFileError, parseDrillFile } from '../../plugin/drill/drill-file';

const tool = (name: string, annotations?: Tool['annotations'], meta?: Record<string, unknown>): Tool => ({
  name,
  inputSchema: { type: 'object' },
  ...(annotations && { annotations }),
  ...(meta && { _meta: meta }),
});

const checks = (tools: Tool[], kind: 'plugin' | 'sandbox' | 'remote' = 'plugin') =>
  checkListing(tools, kind).map((f) => [f.function, f.severity, f.check]);

test('Words: a key that is not true is an error: oz0 does not take the function as honouring it', () => {
  expect(checks([tool('f', { idempotentHint: true }, { 'oz0/idempotency_key': 'yes' })])).toEqual([
    ['f', 'error', 'key-not-true'],
  ]);
});

test('Words: honouring the key without idempotentHint, or the hint without the key, is half a declaration', () => {
  expect(checks([tool('f', { destructiveHint: false }, { 'oz0/idempotency_key': true })])).toEqual([
    ['f', 'warning', 'key-without-idempotent'],
  ]);
  expect(checks([tool('g', { idempotentHint: true })])).toEqual([['g', 'warning', 'idempotent-without-key']]);
});

test('S (issue 45.8): a server whose idempotent functions do not honour the key is told so once, naming them', () => {
  const tools = [
    tool('a', { idempotentHint: true }),
    tool('b', { idempotentHint: true }),
    tool('c', { readOnlyHint: true }),
  ];
  const findings = checkListing(tools, 'plugin');
  expect(findings).toEqual([
    {
      severity: 'warning',
      check: 'idempotent-without-key',
      message:
        '2 functions (a, b) say idempotentHint: true but do not honour oz0\'s key (_meta["oz0/idempotency_key"]), so oz0 gives each of their calls one attempt and makes none again; their author can honour the key to have failed calls made again',
    },
  ]);
});

test('S (issue 45.8): each function listed with its hints and whether oz0 makes a failed call again', () => {
  expect(
    listedFunctions([
      tool('read', { readOnlyHint: true }),
      tool('keyed', { idempotentHint: true, destructiveHint: false }, { 'oz0/idempotency_key': true }),
      tool('hinted', { idempotentHint: true }),
      tool('bare'),
    ]),
  ).toEqual([
    { function: 'read', hints: ['readOnly'], calls: 'again' },
    { function: 'keyed', hints: ['idempotent', 'not destructive', 'honours the key'], calls: 'again' },
    { function: 'hinted', hints: ['idempotent'], calls: 'once' },
    { function: 'bare', hints: [], calls: 'once' },
  ]);
});

test('Words: a function with no hints is taken as a destructive write, and said so', () => {
  expect(checks([tool('f'), tool('g', { openWorldHint: true })])).toEqual([
    ['f', 'warning', 'write-without-hints'],
    ['g', 'warning', 'write-without-hints'],
  ]);
});

test('P3/P6: resume declared on a plugin or sandboxed server is a warning; on a remote one it is fine', () => {
  const t = tool('s', { readOnlyHint: true }, { 'oz0/resume': true });
  expect(checks([t], 'plugin')).toEqual([['s', 'warning', 'resume-not-remote']]);
  expect(checks([t], 'sandbox')).toEqual([['s', 'warning', 'resume-not-remote']]);
  expect(checks([t], 'remote')).toEqual([]);
  expect(checks([tool('s', { readOnlyHint: true }, { 'oz0/resume': 1 })], 'remote')).toEqual([
    ['s', 'error', 'resume-not-true'],
  ]);
});

test('Words: a keyed write is idempotentHint, honours the key, and does not only read', () => {
  expect(isKeyedWrite(tool('w', { idempotentHint: true }, { 'oz0/idempotency_key': true }))).toBe(true);
  expect(isKeyedWrite(tool('w', { idempotentHint: true }))).toBe(false);
  expect(isKeyedWrite(tool('r', { readOnlyHint: true, idempotentHint: true }, { 'oz0/idempotency_key': true }))).toBe(
    false,
  );
});

test('P3: a sample’s progress must increase and its tokens keep the rule', () => {
  const resumes = tool('s', { readOnlyHint: true }, { 'oz0/resume': true });
  const found = checkProgress(resumes, 'remote', [
    { progress: 1, total: 3, token: 'a:1' },
    { progress: 1, total: 3, token: 'a:1' },
    { progress: 4, total: 3, token: 'a 4' },
  ]).map((f) => [f.severity, f.check]);
  expect(found).toEqual([
    ['error', 'progress-not-increasing'],
    ['warning', 'progress-over-total'],
    ['error', 'token-invalid'],
  ]);
  expect(checkProgress(resumes, 'remote', [{ progress: 1 }]).map((f) => f.check)).toEqual(['token-missing']);
  expect(checkProgress(tool('r', { readOnlyHint: true }), 'remote', [{ progress: 1, token: 'x' }])).toMatchObject([
    { severity: 'warning', check: 'token-undeclared' },
  ]);
  expect(
    checkProgress(resumes, 'remote', [
      { progress: 1, token: 'a:1' },
      { progress: 2.5, token: 'a:2' },
    ]),
  ).toEqual([]);
});

test('CLI plugin test: the drill file is validated, naming each bad field; defaults fill the rest', () => {
  expect(parseDrillFile({ functions: { charge: { args: { a: 1 } } } })).toEqual({
    functions: { charge: { args: { a: 1 } } },
    samples: {},
    cancelAfterMs: 100,
    settleMs: 200,
    timeoutSeconds: 30,
  });
  expect(() => parseDrillFile({ functions: { charge: { arg: {} } } })).toThrow(DrillFileError);
  expect(() => parseDrillFile({ functions: { charge: { args: {}, count: { function: 'c', path: 'a..b' } } } })).toThrow(
    /functions\.charge\.count\.path/,
  );
  expect(() => parseDrillFile({ cancelAfterMs: 0 })).toThrow(/cancelAfterMs/);
});
