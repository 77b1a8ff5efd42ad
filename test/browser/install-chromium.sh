#!/usr/bin/env bash
# Finds a Chromium for the Web UI test (test/integration/web-ui.test.ts) and prints its path. Exits 1, saying why, when
# none can be had. Order: $OZ0_CHROMIUM; Debian's chromium where present (chromium / chromium-browser on PATH,
# /usr/bin/chromium); npm's @sparticuz/chromium, a devDependency, unpacked into .tools/chromium/ (npm-chromium.js);
# last, where that does not run here, Debian's chromium installed with apt-get (root, apt-get present).
set -euo pipefail

found() {
  echo "$1"
  exit 0
}

if [ -n "${OZ0_CHROMIUM:-}" ]; then
  [ -x "$OZ0_CHROMIUM" ] || { echo "OZ0_CHROMIUM=$OZ0_CHROMIUM is not an executable file" >&2; exit 1; }
  found "$OZ0_CHROMIUM"
fi
for name in chromium chromium-browser; do
  if command -v "$name" >/dev/null 2>&1; then found "$(command -v "$name")"; fi
done
[ -x /usr/bin/chromium ] && found /usr/bin/chromium

# npm's: what it says (its version, or why it does not run) goes to stderr.
if npm_chromium="$(node "$(dirname "$0")/npm-chromium.js")"; then found "$npm_chromium"; fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "no Chromium found, and no apt-get to install Debian's chromium" >&2
  exit 1
fi
if [ "$(id -u)" != 0 ]; then
  echo "no Chromium found; installing Debian's chromium needs root: sudo apt-get install chromium" >&2
  exit 1
fi
echo "installing Debian's chromium with apt-get (once)" >&2
apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >&2
[ -x /usr/bin/chromium ] && found /usr/bin/chromium
echo "apt-get installed chromium, but /usr/bin/chromium is not there" >&2
exit 1
