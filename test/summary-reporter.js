'use strict';
// Prints, under a failing test, the part of its file's node log that the test wrote (test/logs.ts), and ends the run
// with one plain line, "jest: N passed, N failed, N skipped", that any CI can read.
const fs = require('node:fs');
const path = require('node:path');

const ROOT = path.resolve(__dirname, '..');
const MAX_LINES = 60;

function logFileOf(testPath) {
  const rel = path.relative(ROOT, testPath).replace(/[\\/]/g, '__');
  return path.join(ROOT, '.oz0', 'test-logs', process.env.OZ0_TEST_RUN ?? 'adhoc', `${rel}.log`);
}

/** The lines between a test's marker and the next one; the last lines of the file when there is no marker. */
function partOf(lines, testName) {
  const start = testName === undefined ? -1 : lines.lastIndexOf(`--- test: ${testName}`);
  if (start < 0) return lines.slice(-MAX_LINES);
  const end = lines.findIndex((l, i) => i > start && l.startsWith('--- test: '));
  return lines.slice(start + 1, end < 0 ? undefined : end).slice(-MAX_LINES);
}

class SummaryReporter {
  constructor() {
    /** The titles of skipped tests: each says why it was skipped (a tool this machine lacks, and how to get it). */
    this.skipped = [];
  }

  onTestResult(_test, result) {
    for (const t of result.testResults) if (t.status === 'pending') this.skipped.push(t.fullName);
    const failed = result.testResults.filter((t) => t.status === 'failed');
    if (failed.length === 0 && !result.testExecError) return;
    const file = logFileOf(result.testFilePath);
    if (!fs.existsSync(file)) return;
    const lines = fs.readFileSync(file, 'utf8').split('\n');
    const names = failed.length ? failed.map((t) => t.fullName) : [undefined];
    for (const name of names) {
      const part = partOf(lines, name).filter((l) => l && !l.startsWith('--- test: '));
      if (part.length === 0) continue;
      process.stdout.write(`\nnode log for ${name ?? path.relative(ROOT, result.testFilePath)} (${file}):\n`);
      process.stdout.write(`${part.join('\n')}\n`);
    }
  }

  onRunComplete(_contexts, results) {
    const skipped = results.numPendingTests + results.numTodoTests;
    process.stdout.write(
      `\njest: ${results.numPassedTests} passed, ${results.numFailedTests} failed, ${skipped} skipped\n`,
    );
    for (const title of this.skipped) process.stdout.write(`skipped: ${title}\n`);
    if (process.env.OZ0_TEST_RUN) {
      process.stdout.write(`logs: ${path.join('.oz0', 'test-logs', process.env.OZ0_TEST_RUN)}\n`);
      // Screenshots and other artifacts a test kept (the Web UI test's).
      const artifacts = path.join('.oz0', 'test-artifacts', process.env.OZ0_TEST_RUN);
      if (fs.existsSync(path.join(ROOT, artifacts))) process.stdout.write(`artifacts: ${artifacts}\n`);
    }
  }
}
module.exports = SummaryReporter;
