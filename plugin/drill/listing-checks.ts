/**
 * What `oz0 plugin test` finds wrong in a server's listing and in the progress of a sample call. Pure: a listing (or
 * what a call reported) in, findings out.
 */
import type { Tool } from '@modelcontextprotocol/client';
import type { ServerKind } from '../../common/config';
import { IDEMPOTENCY_KEY_META, RESUME_META, RESUME_TOKEN, declaresResume, honoursKey } from '../../model/protocol';

/** An error makes `oz0 plugin test` exit 1; a warning is only shown. */
export type Severity = 'error' | 'warning';

export interface Finding {
  severity: Severity;
  /** The function it is about; none for the server as a whole. */
  function?: string;
  /** A short fixed name of what was checked, for scripts. */
  check: string;
  message: string;
}

/** A write oz0 makes again under its key: `idempotentHint: true`, honours the key, and not read-only. */
export function isKeyedWrite(tool: Pick<Tool, 'annotations' | '_meta'>): boolean {
  return tool.annotations?.readOnlyHint !== true && tool.annotations?.idempotentHint === true && honoursKey(tool);
}

/** The inconsistencies of one function's declaration, for a server of this kind. */
export function checkTool(tool: Tool, kind: ServerKind): Finding[] {
  const out: Finding[] = [];
  const add = (severity: Severity, check: string, message: string) =>
    out.push({ severity, function: tool.name, check, message });
  const hints = tool.annotations ?? {};
  const meta = tool._meta ?? {};
  const keyMeta = meta[IDEMPOTENCY_KEY_META];
  const resumeMeta = meta[RESUME_META];

  if (keyMeta !== undefined && keyMeta !== true) {
    add(
      'error',
      'key-not-true',
      `_meta["oz0/idempotency_key"] is ${JSON.stringify(keyMeta)}, not true: oz0 reads only true, so it takes this ` +
        'function as one that does not honour the key and gives each call one attempt',
    );
  }
  if (resumeMeta !== undefined && resumeMeta !== true) {
    add(
      'error',
      'resume-not-true',
      `_meta["oz0/resume"] is ${JSON.stringify(resumeMeta)}, not true: oz0 reads only true, and never resumes it`,
    );
  }
  if (honoursKey(tool) && hints.idempotentHint !== true) {
    add(
      'warning',
      'key-without-idempotent',
      'honours the key but does not say idempotentHint: true, so oz0 makes each call once and the key buys ' +
        'nothing: add the hint (idempotentWrite()), or drop the key where a repeat must act again',
    );
  }
  if (hints.idempotentHint === true && hints.readOnlyHint !== true && !honoursKey(tool) && keyMeta === undefined) {
    add(
      'warning',
      'idempotent-without-key',
      'says idempotentHint: true but not _meta["oz0/idempotency_key"]: true, so oz0 gives each call one attempt; ' +
        'honour the key (idempotentWrite() and a key store) to have failed calls made again',
    );
  }
  if (resumeMeta === true && kind !== 'remote') {
    add(
      'warning',
      'resume-not-remote',
      `declares _meta["oz0/resume"] on a ${kind === 'sandbox' ? 'sandboxed' : 'plugin'} server: oz0 resumes only ` +
        'remote (url:) servers, and takes no resume token from this one (P3, P6)',
    );
  }
  if (hints.readOnlyHint === undefined && hints.idempotentHint === undefined && hints.destructiveHint === undefined) {
    add(
      'warning',
      'write-without-hints',
      'says neither readOnlyHint, idempotentHint nor destructiveHint, so it is taken as a destructive write: one ' +
        'attempt per call. Say readOnly(), idempotentWrite() or oneAttemptWrite()',
    );
  }
  if (hints.readOnlyHint === true && hints.destructiveHint === true) {
    add('warning', 'read-only-destructive', 'says both readOnlyHint: true and destructiveHint: true');
  }
  return out;
}

/** Every function's findings, in listing order. */
export function checkListing(tools: Tool[], kind: ServerKind): Finding[] {
  const findings = tools.flatMap((tool) => checkTool(tool, kind));
  // Meant for the server's author, and the same for each such function: said once, naming them (a server written by
  // someone else is not told fourteen times what its author could do).
  const unkeyed = findings.filter((f) => f.check === 'idempotent-without-key');
  if (unkeyed.length < 2) return findings;
  const names = unkeyed.map((f) => f.function!);
  return [
    ...findings.filter((f) => f.check !== 'idempotent-without-key'),
    {
      severity: 'warning',
      check: 'idempotent-without-key',
      message: `${names.length} functions (${names.join(', ')}) say idempotentHint: true but do not honour oz0's key (_meta["${IDEMPOTENCY_KEY_META}"]), so oz0 gives each of their calls one attempt and makes none again; their author can honour the key to have failed calls made again`,
    },
  ];
}

/** One function as oz0 calls it: its hints, and whether a failed call is made again (SPEC "Words"). */
export interface ListedFunction {
  function: string;
  hints: string[];
  /** `again` — a failed call is made again (it reads, or is idempotent and honours the key); `once` — one attempt. */
  calls: 'again' | 'once';
}

export function listedFunctions(tools: Tool[]): ListedFunction[] {
  return tools.map((tool) => {
    const a = tool.annotations ?? {};
    const hints = [
      a.readOnlyHint === true && 'readOnly',
      a.idempotentHint === true && 'idempotent',
      a.destructiveHint === true && 'destructive',
      a.destructiveHint === false && 'not destructive',
      a.openWorldHint === true && 'open world',
      honoursKey(tool) && 'honours the key',
    ].filter((h): h is string => typeof h === 'string');
    const again = a.readOnlyHint === true || (a.idempotentHint === true && honoursKey(tool));
    return { function: tool.name, hints, calls: again ? 'again' : 'once' };
  });
}

/** One progress notification as a sample call saw it. */
export interface SeenProgress {
  progress: number;
  total?: number;
  /** `_meta["oz0/resume"]` as it came, whatever it is. */
  token?: unknown;
}

/**
 * The findings of a sample call's progress: progress increases (MCP; oz0 ignores a value that does not), stays
 * within its total, and each resume token keeps the token rule (P3) — or there are none when the function does not
 * declare resume, which oz0 would ignore.
 */
export function checkProgress(tool: Tool, kind: ServerKind, seen: SeenProgress[]): Finding[] {
  const out: Finding[] = [];
  const add = (severity: Severity, check: string, message: string) =>
    out.push({ severity, function: tool.name, check, message });
  const declares = declaresResume(tool);
  let last = -Infinity;
  seen.forEach((p, i) => {
    if (!Number.isFinite(p.progress) || p.progress <= last) {
      add(
        'error',
        'progress-not-increasing',
        `progress notification ${i + 1} says ${p.progress} after ${last}: progress must increase (oz0 ignores it)`,
      );
    } else {
      last = p.progress;
    }
    if (p.total !== undefined && p.progress > p.total) {
      add('warning', 'progress-over-total', `progress notification ${i + 1} says ${p.progress} of ${p.total}`);
    }
    if (p.token !== undefined && !(typeof p.token === 'string' && RESUME_TOKEN.test(p.token))) {
      add(
        'error',
        'token-invalid',
        `progress notification ${i + 1} carries the resume token ${JSON.stringify(p.token)}: a token is 1-256 ` +
          'letters, digits or ._:~+/=- (P3); oz0 ignores it and the trace says so',
      );
    }
  });
  const tokens = seen.filter((p) => p.token !== undefined).length;
  if (tokens > 0 && !declares) {
    add(
      'warning',
      'token-undeclared',
      `${tokens} progress notifications carry _meta["oz0/resume"], but the listing does not declare ` +
        '_meta["oz0/resume"]: true, so oz0 takes none of them',
    );
  }
  if (declares && kind === 'remote' && seen.length > 0 && tokens === 0) {
    add(
      'warning',
      'token-missing',
      'declares _meta["oz0/resume"]: true, but its progress carried no token: a retry can only start over',
    );
  }
  return out;
}
