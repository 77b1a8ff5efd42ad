/** @type {import('jest').Config} */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  globalSetup: '<rootDir>/test/global-setup.ts',
  globalTeardown: '<rootDir>/test/global-teardown.ts',
  setupFilesAfterEnv: ['<rootDir>/test/setup-logs.ts'],
  // Integration files run against one real Temporal dev server per worker (test/helpers/shared-temporal.ts), each in
  // a namespace of its own; two workers fit 2 cores.
  maxWorkers: 2,
  testTimeout: 120_000,
  reporters: ['default', '<rootDir>/test/summary-reporter.js'],
  transform: { '^.+\\.ts$': 'ts-jest' },
};
