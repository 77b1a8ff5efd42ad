/**
 * `oz0/plugin`: what a TypeScript MCP server (on `@modelcontextprotocol/sdk`) needs to take part in oz0 — read the
 * idempotency key, keep key → answer across restarts, answer busy, report resumable progress and read the resume
 * request, and declare all of it in the listing. docs/plugin-authors.md shows each in use.
 */
export { IDEMPOTENCY_KEY_META, MAX_KEY_LENGTH, idempotencyKey, missingKey } from './keys';
export type { RequestWithMeta } from './keys';
export { KeyReuseError, KeyStore, KeyStoreError, openKeyStore, readKeyStore } from './store';
export type { KeyRecord, KeyStoreOptions, OnceOptions } from './store';
export { keyedTool } from './keyed';
export { RETRYABLE_META, RETRY_AFTER_META, busy, isBusy } from './busy';
export { RESUME_META, RESUME_TOKEN, isResumeToken, progress, resumeRequest } from './progress';
export type { ProgressExtra, ResumeRequest } from './progress';
export { idempotentWrite, oneAttemptWrite, readOnly } from './listing';
export type { Declaration, DeclarationOptions } from './listing';
