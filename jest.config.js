/** @type {import('jest').Config} */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  globalSetup: '<rootDir>/test/global-setup.ts',
  globalTeardown: '<rootDir>/test/global-teardown.ts',
  testSequencer: '<rootDir>/test/sequencer.js',
  setupFilesAfterEnv: ['<rootDir>/test/setup-logs.ts'],
  // Integration files run against one real Temporal dev server per worker (test/helpers/shared-temporal.ts), each in
  // a namespace of its own. Most of a file's time is waiting (heartbeat timeouts, a lost node taken for lost, a
  // process starting): a whole run kept 2 cores about half busy, so three workers fit 2 cores.
  maxWorkers: 3,
  testTimeout: 120_000,
  reporters: ['default', '<rootDir>/test/summary-reporter.js'],
  transform: { '^.+\\.ts$': 'ts-jest' },
};
