/**
 * Listing declarations: the hints (MCP tool annotations) and the `_meta` oz0 reads, made together so a declaration
 * cannot be half made — a key honoured without `idempotentHint`, or the hint without the key. Spread one into
 * `registerTool`'s config:
 *
 * ```ts
 * server.registerTool('charge', { inputSchema, ...idempotentWrite() }, handler);
 * ```
 */
import type { ToolAnnotations } from '@modelcontextprotocol/server';
import { IDEMPOTENCY_KEY_META } from './keys';
import { RESUME_META } from './progress';

/** The part of a `registerTool` config that a declaration fills. */
export interface Declaration {
  annotations: ToolAnnotations;
  _meta?: Record<string, unknown>;
}

/** Options shared by the declarations. */
export interface DeclarationOptions {
  /** `openWorldHint`: the function talks to something outside the server (a payment API, the web). */
  openWorld?: boolean;
  /**
   * `_meta["oz0/resume"]: true`: progress carries resume tokens and a later attempt may go on from one. oz0 resumes
   * only remote servers (P3); a plugin or sandboxed server that says so gets a warning from `oz0 plugin test`.
   */
  resume?: boolean;
}

function meta(entries: Record<string, unknown>): Pick<Declaration, '_meta'> {
  return Object.keys(entries).length ? { _meta: entries } : {};
}

function openWorld(opts: DeclarationOptions): Pick<ToolAnnotations, 'openWorldHint'> {
  return opts.openWorld === undefined ? {} : { openWorldHint: opts.openWorld };
}

/**
 * A write that is safe to make again under its key: `idempotentHint: true`, `destructiveHint: false`, and
 * `_meta["oz0/idempotency_key"]: true`. oz0 makes its failed calls again under the same key (SPEC "Words"), so the
 * handler must keep key → answer (a {@link KeyStore}); `oz0 plugin test --drill` checks that it does.
 */
export function idempotentWrite(opts: DeclarationOptions = {}): Declaration {
  return {
    annotations: { idempotentHint: true, destructiveHint: false, ...openWorld(opts) },
    ...meta({ [IDEMPOTENCY_KEY_META]: true, ...(opts.resume && { [RESUME_META]: true }) }),
  };
}

/** A function that only reads: `readOnlyHint: true`. oz0 may make its calls again, and asks for progress (P1). */
export function readOnly(opts: DeclarationOptions = {}): Declaration {
  return {
    annotations: { readOnlyHint: true, ...openWorld(opts) },
    ...meta(opts.resume ? { [RESUME_META]: true } : {}),
  };
}

/**
 * A write that must act on every call: `readOnlyHint: false`, `idempotentHint: false`, and `destructiveHint` (true
 * unless told). oz0 gives each of its calls exactly one attempt. Use it where even a fresh session's repeat of a
 * lost session's call must act again.
 */
export function oneAttemptWrite(
  opts: Omit<DeclarationOptions, 'resume'> & { destructive?: boolean } = {},
): Declaration {
  return {
    annotations: {
      readOnlyHint: false,
      idempotentHint: false,
      destructiveHint: opts.destructive ?? true,
      ...openWorld(opts),
    },
  };
}
