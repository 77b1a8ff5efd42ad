#!/usr/bin/env node
'use strict';
/**
 * npm's @sparticuz/chromium (a pinned devDependency): the headless Chromium it ships brotli'd, unpacked once into
 * .tools/chromium/<version>/, checked to run here, and its path printed. Exits 1, saying why, when it cannot be had.
 *
 * The package unpacks into the OS temp folder (os.tmpdir()) and takes any `chromium` already there as its own, of
 * whatever version: TMPDIR points it at a fresh folder of this project's, renamed into place only when whole, so a
 * half-unpacked binary (an interrupted run, two runs at once) is never taken. It needs the system's NSS and NSPR
 * (Debian's libnss3 and libnspr4); what is missing is named from ldd.
 */
const { execFileSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

function fail(why) {
  process.stderr.write(`${why}\n`);
  process.exit(1);
}

async function main() {
  let main;
  try {
    main = require.resolve('@sparticuz/chromium', { paths: [path.join(__dirname, '..', '..')] });
  } catch {
    fail("npm's @sparticuz/chromium is not installed: run `npm install` (it is a devDependency)");
  }
  // Its exports do not include package.json: the folder above build/cjs/ has it.
  const { version } = JSON.parse(fs.readFileSync(path.join(main, '..', '..', '..', 'package.json'), 'utf8'));
  const root = path.join(__dirname, '..', '..', '.tools', 'chromium');
  const dir = path.join(root, version);
  const binary = path.join(dir, 'chromium');
  if (!fs.existsSync(binary)) {
    const partial = path.join(root, `.${version}-${process.pid}`);
    fs.mkdirSync(partial, { recursive: true });
    process.env.TMPDIR = partial;
    try {
      const Chromium = require(main);
      const unpacked = await Chromium.executablePath();
      if (unpacked !== path.join(partial, 'chromium'))
        fail(`@sparticuz/chromium unpacked to ${unpacked}, not ${partial}`);
      try {
        fs.renameSync(partial, dir);
      } catch (err) {
        // Another run put a whole copy in place first: keep it.
        if (!fs.existsSync(binary)) throw err;
      }
    } finally {
      fs.rmSync(partial, { recursive: true, force: true });
    }
  }
  let shown;
  try {
    shown = execFileSync(binary, ['--version'], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 30_000,
    });
  } catch (err) {
    let missing = '';
    try {
      missing = execFileSync('ldd', [binary], { encoding: 'utf8' })
        .split('\n')
        .filter((line) => line.includes('not found'))
        .map((line) => line.trim().split(' ')[0])
        .join(', ');
    } catch {
      // no ldd: the error alone says it
    }
    fail(
      missing
        ? `npm's Chromium ${version} does not run here: it needs ${missing} (Debian: apt-get install libnss3 libnspr4)`
        : `npm's Chromium ${version} does not run here: ${String(err.stderr || err.message)
            .trim()
            .split('\n')
            .at(-1)}`,
    );
  }
  process.stderr.write(`npm's @sparticuz/chromium ${version}: ${shown.trim()}\n`);
  process.stdout.write(`${binary}\n`);
}

main().catch((err) => fail(`npm's @sparticuz/chromium: ${err.message}`));
