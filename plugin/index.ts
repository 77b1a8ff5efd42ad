/**
 * `oz0/plugin`: what a TypeScript MCP server (on `@modelcontextprotocol/server`, or the 1.x SDK) needs to take part in
 * oz0 — read the idempotency key, keep key → answer across restarts, answer busy, report resumable progress and read
 * the resume request, and declare all of it in the listing. docs/plugin-authors.md shows each in use.
 */
export { IDEMPOTENCY_KEY_META, MAX_KEY_LENGTH, idempotencyKey, missingKey } from './kit/keys';
export type { RequestWithMeta } from './kit/keys';
export { KeyBusyError, KeyReuseError, KeyStore, KeyStoreError, openKeyStore, readKeyStore } from './kit/store';
export type { KeyRecord, KeyStoreOptions, OnceOptions, OnceRun } from './kit/store';
export { keyedTool } from './kit/keyed';
export { RETRYABLE_META, RETRY_AFTER_META, busy, isBusy } from './kit/busy';
export { RESUME_META, RESUME_TOKEN, isResumeToken, progress, resumeRequest } from './kit/progress';
export type { ProgressExtra, ResumeRequest } from './kit/progress';
export { idempotentWrite, oneAttemptWrite, readOnly } from './kit/listing';
export type { Declaration, DeclarationOptions } from './kit/listing';
