/** @type {import('jest').Config} */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/test'],
  testMatch: ['**/*.test.ts'],
  globalSetup: '<rootDir>/test/global-setup.ts',
  setupFilesAfterEnv: ['<rootDir>/test/setup-logs.ts'],
  // Integration tests each start a real Temporal dev server; two at a time fit 2 cores.
  maxWorkers: 2,
  testTimeout: 120_000,
  reporters: ['default', '<rootDir>/test/summary-reporter.js'],
  transform: { '^.+\\.ts$': 'ts-jest' },
};
