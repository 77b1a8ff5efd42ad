import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import importX from 'eslint-plugin-import-x';
import prettier from 'eslint-config-prettier';
import { builtinModules } from 'node:module';
import local from './eslint/layers.mjs';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];
const REPLAYED = 'workflows/ and model/ are replayed';
/** What workflow code, and the model it imports, may not import (SPEC T5). */
const deterministic = nodeBuiltins.map((name) => ({ name, message: `${REPLAYED}: no Node built-ins` }));
const pure = [
  { group: ['@modelcontextprotocol/*'], message: `${REPLAYED}: they never talk MCP, that is an activity` },
  {
    group: ['@temporalio/activity', '@temporalio/worker', '@temporalio/client', '@temporalio/testing'],
    message: `${REPLAYED}: they import only @temporalio/workflow (and @temporalio/common)`,
  },
  { group: ['pino', 'pino/*'], message: `${REPLAYED}: they log through @temporalio/workflow log` },
];
/**
 * zod would be most of the workflow bundle, in every cached workflow: model/schemas.ts alone imports it, and the
 * workflows and the rest of model/ take only its types, so nothing the bundle imports at runtime reaches zod.
 */
const zodFree = [
  { group: ['zod', 'zod/*'], message: 'zod would be most of the workflow bundle: schemas live in model/schemas.ts' },
  {
    regex: '^(\\./|\\.\\./model/)schemas(\\.js)?$',
    allowTypeImports: true,
    message: 'model/schemas.ts holds zod, which would be most of the workflow bundle: import type its types only',
  },
];

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.tools/**', '.oz0/**', 'coverage/**', '**/*.js', '**/*.mjs'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    files: ['**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    plugins: { 'import-x': importX, local },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      'import-x/no-cycle': 'error',
      // Imports run one way (STYLE.md), and a cycle through type-only imports is a cycle too.
      'local/layers': 'error',
      'local/no-cycle': 'error',
      eqeqeq: ['error', 'always'],
    },
  },
  {
    // Workflow code is replayed: workflows/, and model/ which it imports, use only @temporalio/workflow and pure
    // modules (SPEC T5); and zod stays out of what the workflow bundle imports.
    files: ['workflows/**/*.ts', 'model/**/*.ts'],
    ignores: ['model/schemas.ts'],
    rules: {
      '@typescript-eslint/no-restricted-imports': ['error', { paths: deterministic, patterns: [...pure, ...zodFree] }],
    },
  },
  {
    // workflows/tracing.ts draws its span ids from the workflow's seeded Math.random: any other draw in workflow code
    // would take different numbers on a node that traces and on one that does not, and a job moves between them (T5).
    files: ['workflows/**/*.ts', 'model/**/*.ts'],
    ignores: ['workflows/tracing.ts'],
    rules: {
      'no-restricted-properties': [
        'error',
        { object: 'Math', property: 'random', message: 'workflows/tracing.ts alone draws from Math.random (T5)' },
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector: "ImportSpecifier[imported.name='uuid4']",
          message: 'uuid4 draws from Math.random, which workflows/tracing.ts alone draws from (T5)',
        },
      ],
    },
  },
  {
    // model/schemas.ts holds zod; the workflows take only its types.
    files: ['model/schemas.ts'],
    rules: { '@typescript-eslint/no-restricted-imports': ['error', { paths: deterministic, patterns: pure }] },
  },
  prettier,
);
