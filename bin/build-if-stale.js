#!/usr/bin/env node
/**
 * `npm run demo` (and `npm run tickets`) right after `npm install`, which built dist/ already: builds again only when a
 * source or the build's own config is newer than the last build (`dist/.built`, which `npm run build` writes last).
 */
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { spawnSync } = require('node:child_process');

const root = path.join(__dirname, '..');
const SKIP = new Set(['node_modules', 'dist', '.tools', '.oz0', '.git', 'test', 'coverage']);

function newest(p) {
  const stat = fs.statSync(p);
  if (!stat.isDirectory()) return /\.(ts|json|mjs)$/.test(p) ? stat.mtimeMs : 0;
  let most = 0;
  for (const entry of fs.readdirSync(p)) if (!SKIP.has(entry)) most = Math.max(most, newest(path.join(p, entry)));
  return most;
}

let built = 0;
try {
  built = fs.statSync(path.join(root, 'dist', '.built')).mtimeMs;
} catch {
  // never built
}
if (newest(root) > built) {
  const run = spawnSync('npm', ['run', 'build'], { cwd: root, stdio: 'inherit' });
  process.exit(run.status ?? 1);
}
