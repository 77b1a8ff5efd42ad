/**
 * T5, issue 36.3: the workflow bundle preloads oz0's workflow modules (worker/bundle.ts), so every job cached on a
 * node shares one instance of each — its code, its constants, its dependencies (hashing, canonical JSON) — instead of
 * evaluating them all again per job. That holds only while no module of workflows/ or model/ keeps state at its top
 * level: one job's would be every job's, and replay would depend on which jobs ran before. These tests read the
 * modules for it, beside a control that shows the reader finds such state, and check the bundle preloads them.
 */
import fs from 'node:fs';
import path from 'node:path';
import { BUNDLE_FILE, TRACED_BUNDLE_FILE, latin1 } from '../../worker/bundle';

const ROOT = path.join(__dirname, '..', '..');

/** Top-level statements that make a module hold state: a variable, or a container made to be filled. */
function topLevelState(source: string): string[] {
  return source
    .split('\n')
    .filter(
      (line) =>
        /^(export )?(let|var) /.test(line) ||
        /^(export )?const \w+(: [^=]+)? = new (Map|Set|WeakMap|Array)\b/.test(line),
    );
}

const modules = ['workflows', 'model'].flatMap((dir) =>
  fs
    .readdirSync(path.join(ROOT, dir))
    .filter((f) => f.endsWith('.ts'))
    .map((f) => path.join(dir, f)),
);

test.each(modules)('T5: %s keeps no state at its top level (the bundle shares it between jobs)', (file) => {
  expect(topLevelState(fs.readFileSync(path.join(ROOT, file), 'utf8'))).toEqual([]);
});

test('T5: the reader of top-level state finds it (control)', () => {
  const hostile = [
    'let calls = 0;',
    'export var last: string | undefined;',
    'const seen = new Map<string, number>();',
    'export const keys: Set<string> = new Set();',
    'const LIMIT = 5;',
    'function f() {',
    '  let inside = 1;',
    '}',
  ].join('\n');
  expect(topLevelState(hostile)).toEqual([
    'let calls = 0;',
    'export var last: string | undefined;',
    'const seen = new Map<string, number>();',
    'export const keys: Set<string> = new Set();',
  ]);
});

test.each([BUNDLE_FILE, TRACED_BUNDLE_FILE])('T5: %s preloads the workflows module once for every job', (file) => {
  const code = fs.readFileSync(file, 'utf8');
  expect(code).toMatch(
    /exports\.preloadModules = function preloadModules\(\) \{\s*__webpack_require__\([^)]*workflows\/index\.js"\)/,
  );
});

test.each([BUNDLE_FILE, TRACED_BUNDLE_FILE])('T5: %s is Latin-1 only, so V8 keeps it one byte a character', (file) => {
  expect(fs.readFileSync(file, 'utf8')).not.toMatch(/[\u0100-\uffff]/);
});

test('T5: a character past Latin-1 in the bundle becomes an escape that means the same', () => {
  const source =
    "const a = `- … and ${2} more`; const b = 'x → y'; // — c\nconst r = /[—]/.test('—'); exports.v = [a, b, r];";
  const escaped = latin1(source);
  expect(escaped).not.toMatch(/[\u0100-\uffff]/);
  expect(escaped).toContain('\\u2026');
  const run = (code: string) => {
    const m = { exports: {} as { v?: unknown } };
    new Function('exports', code)(m.exports);
    return m.exports.v;
  };
  expect(run(escaped)).toEqual(['- … and 2 more', 'x → y', true]);
  expect(run(escaped)).toEqual(run(source));
});
