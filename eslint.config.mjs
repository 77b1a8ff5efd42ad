import js from '@eslint/js';
import tseslint from 'typescript-eslint';
import importX from 'eslint-plugin-import-x';
import prettier from 'eslint-config-prettier';
import { builtinModules } from 'node:module';
import local from './eslint/layers.mjs';

const nodeBuiltins = [...builtinModules, ...builtinModules.map((m) => `node:${m}`)];

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
    // Workflow code is replayed: it may use only @temporalio/workflow and pure modules (SPEC T5).
    files: ['workflows/**/*.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          paths: nodeBuiltins.map((name) => ({ name, message: 'workflows/ is deterministic: no Node built-ins' })),
          patterns: [
            { group: ['@modelcontextprotocol/*'], message: 'workflows/ never talks MCP: that is an activity' },
            {
              group: ['@temporalio/activity', '@temporalio/worker', '@temporalio/client', '@temporalio/testing'],
              message: 'workflows/ imports only @temporalio/workflow',
            },
            { group: ['pino', 'pino/*'], message: 'workflows/ logs through @temporalio/workflow log' },
            {
              group: ['zod', 'zod/*'],
              message:
                'zod would be most of the workflow bundle, in every cached workflow: schemas live in model/schemas.ts',
            },
          ],
        },
      ],
    },
  },
  prettier,
);
