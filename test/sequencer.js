'use strict';
// The order files start in: the longest first, so the workers end together instead of one waiting on a file it
// started last. Jest orders by the durations it cached from the last run; a fresh clone (CI) has none, and jest's
// fallback, file size, starts a short file of long waits (a node killed, a package installed) near the end. There,
// the files below go first by the seconds they took (a run on 2 cores), then the other integration files by size,
// then the unit tests. A file missing from the list only starts later; the list never decides what runs.
const Sequencer = require('@jest/test-sequencer').default;
const path = require('node:path');

/**
 * Seconds each integration file took on a fresh clone (2 cores, load 2-4, three workers); rounded, for order only.
 * harness-nodes, sessions, node-restart, job-ends and stops: that run's figure less the waits the suite branch took
 * out (a lost node's 10 s stop, a stopped node's 30 s probe, the webpack run per file, a 10 s sweep), until the next
 * fresh run measures them.
 */
const MEASURED = {
  harness: 122,
  'harness-nodes': 103,
  python: 102,
  sessions: 78,
  limits: 73,
  tasks: 65,
  protocols: 54,
  drill: 53,
  demo: 52,
  policy: 50,
  grants: 46,
  jobs: 46,
  stops: 45,
  observability: 45,
  confirm: 41,
  isolation: 41,
  'task-extension': 40,
  'confirm-nodes': 40,
  'last-words': 36,
  'job-ends': 32,
  progress: 31,
  busy: 29,
  'web-ui': 28,
  'confirm-sessions': 27,
  conformance: 23,
  'gateway-flood': 23,
  'node-restart': 22,
  cli: 21,
  keys: 21,
  package: 21,
  'fresh-machine': 18,
  'credentials-secrets': 18,
  'credentials-failures': 17,
  credentials: 17,
  servers: 17,
  nodes: 14,
  'sandbox-venv': 14,
  'job-folders': 13,
  'key-store': 12,
  'cli-start': 9,
  'cancel-push': 8,
};

function estimate(test) {
  const rel = path.relative(test.context.config.rootDir, test.path);
  const name = path.basename(test.path).replace(/\.test\.ts$/, '');
  const size = test.context.hasteFS.getSize(test.path) ?? 0;
  if (!rel.startsWith(`test${path.sep}integration`)) return size / 100_000;
  // An unlisted integration file: after the listed ones, before the unit tests, larger first.
  return MEASURED[name] ?? 10 + size / 10_000;
}

class SlowFirstSequencer extends Sequencer {
  sort(tests) {
    const timed = tests.every((t) => this.time(t) != null);
    if (timed) return super.sort(tests);
    return [...tests].sort((a, b) => {
      const failed = Number(this.hasFailed(b)) - Number(this.hasFailed(a));
      return failed || estimate(b) - estimate(a);
    });
  }
}

module.exports = SlowFirstSequencer;
