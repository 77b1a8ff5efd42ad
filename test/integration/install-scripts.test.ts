/**
 * npm's install scripts (issue 32): package.json's `allowScripts` covers every dependency with an install script, so
 * npm 11 lists none as unreviewed and npm 12 (or `--strict-allow-scripts`) skips or refuses none by surprise; the one
 * oz0 needs, better-sqlite3's, is allowed, and its binding is there. docs/development.md, "Install scripts".
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { ROOT } from '../helpers/temporal';

const pkg = JSON.parse(fs.readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as {
  allowScripts: Record<string, boolean>;
  '//': string[];
};
const lock = JSON.parse(fs.readFileSync(path.join(ROOT, 'package-lock.json'), 'utf8')) as {
  packages: Record<string, { version?: string; hasInstallScript?: boolean }>;
};

/** The packages of the lockfile that have an install script: name (from their node_modules path) → versions. */
function withInstallScripts(): Map<string, string[]> {
  const found = new Map<string, string[]>();
  for (const [where, entry] of Object.entries(lock.packages)) {
    if (!entry.hasInstallScript) continue;
    const name = where.slice(where.lastIndexOf('node_modules/') + 'node_modules/'.length);
    found.set(name, [...(found.get(name) ?? []), entry.version ?? '?']);
  }
  return found;
}

test('npm: every dependency with an install script has its allowScripts entry, and the note beside it names each', () => {
  const scripted = [...withInstallScripts().keys()].sort();
  // The control: the lockfile does list the four npm 11.19 warned about.
  expect(scripted).toEqual(expect.arrayContaining(['@parcel/watcher', '@swc/core', 'better-sqlite3', 'protobufjs']));
  expect(scripted.filter((name) => !Object.hasOwn(pkg.allowScripts, name))).toEqual([]);
  // No entry left for a package that no longer has a script.
  expect(Object.keys(pkg.allowScripts).sort()).toEqual(scripted);
  const note = pkg['//'].join(' ');
  for (const name of scripted) expect(note).toContain(name);
});

test("npm: better-sqlite3's script is allowed and built its binding: an SQLite database opens", () => {
  expect(pkg.allowScripts['better-sqlite3']).toBe(true);
  const db = new Database(':memory:');
  try {
    expect(db.prepare('select sqlite_version() as v').get()).toEqual({ v: expect.stringMatching(/^3\./) });
  } finally {
    db.close();
  }
});

test('npm: npm itself finds no install script left unreviewed (npm install-scripts ls, npm 11.16 and later)', async () => {
  // A user's shell: none of the npm_* variables `npm test` sets for its own scripts.
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k)));
  const out = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile('npm', ['install-scripts', 'ls', '--json'], { cwd: ROOT, env, timeout: 60_000 }, (err, stdout, stderr) =>
      resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, stdout, stderr }),
    );
  });
  if (/Unknown command/i.test(out.stderr)) {
    console.warn(
      `npm ${process.env.npm_config_user_agent ?? ''} has no install-scripts command: only the lockfile was checked`,
    );
    return;
  }
  expect(out).toMatchObject({ code: 0 });
  expect(JSON.parse(out.stdout)).toEqual({ allowScripts: [] });
});
