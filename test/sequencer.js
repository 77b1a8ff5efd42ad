'use strict';
// The order files start in: the longest first, so the two workers end together instead of one waiting on a file it
// started last. Jest orders by the durations it cached from the last run; a fresh clone (CI) has none, and jest's
// fallback, file size, starts a short file of long waits (a node killed, a package installed) near the end. There,
// the files below go first by the seconds they took (a run on 2 cores), then the other integration files by size,
// then the unit tests. A file missing from the list only starts later; the list never decides what runs.
const Sequencer = require('@jest/test-sequencer').default;
const path = require('node:path');

/** Seconds each slow integration file took (2 cores, loaded); rounded, for order only. */
const MEASURED = {
  'harness-nodes': 220,
  sessions: 200,
  harness: 195,
  python: 185,
  cli: 135,
  protocols: 110,
  busy: 110,
  'confirm-sessions': 100,
  stops: 100,
  drill: 95,
  tasks: 95,
  demo: 90,
  observability: 85,
  policy: 85,
  confirm: 70,
  package: 70,
  jobs: 70,
  'confirm-nodes': 60,
  progress: 60,
  'task-extension': 60,
  'web-ui': 50,
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
