/** Runs in every test file: each test's part of the log file starts with its name (see test/logs.ts). */
import { markTest } from './logs';

beforeEach(() => {
  const { testPath, currentTestName } = expect.getState();
  if (testPath && currentTestName) markTest(testPath, currentTestName);
});
