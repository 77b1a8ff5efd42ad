/**
 * Idempotency keys (SPEC K1-K6). Pure: no I/O, no clock, so the workflow can decide every key and replay
 * it unchanged.
 */
import { canonicalize } from 'json-canonicalize';
import { sha256 } from '@noble/hashes/sha256';
import { bytesToHex, utf8ToBytes } from '@noble/hashes/utils';

/** The `r<m>/` part after the job continued as new m times; empty in the first run. */
function runPrefix(run: number): string {
  return run > 0 ? `r${run}/` : '';
}

/** K2: `<job>/<activity>`, or `<job>/r<m>/<activity>` after m continues-as-new. */
export function defaultKey(jobId: string, run: number, activityId: string): string {
  return `${jobId}/${runPrefix(run)}${activityId}`;
}

/**
 * K3 digest: the first 32 hex digits of SHA-256 over the arguments in RFC 8785 canonical JSON. No arguments
 * are `{}`, and key order never changes it.
 */
export function argsDigest(args: Record<string, unknown> | undefined): string {
  return bytesToHex(sha256(utf8ToBytes(canonicalize(args ?? {})))).slice(0, 32);
}

/** K3: `<job>/s<n>/<function>#<digest>/<k>`, with `r<m>/` before `s<n>` after continues-as-new. */
export function sessionKey(jobId: string, run: number, session: number, fn: string, digest: string, k: number): string {
  return `${jobId}/${runPrefix(run)}s${session}/${fn}#${digest}/${k}`;
}

/**
 * Counts calls per (function, digest) within one attempt of one session, so equal calls get `…/1`, `…/2`
 * (K4) and a fresh session that replays the same calls gets the same keys.
 */
export class SessionKeys {
  private readonly seen = new Map<string, number>();

  constructor(
    private readonly jobId: string,
    private readonly run: number,
    private readonly session: number,
  ) {}

  /** The K3 key of the next call of `fn` with these arguments. */
  next(fn: string, args: Record<string, unknown> | undefined): string {
    const digest = argsDigest(args);
    const k = (this.seen.get(`${fn}#${digest}`) ?? 0) + 1;
    this.seen.set(`${fn}#${digest}`, k);
    return sessionKey(this.jobId, this.run, this.session, fn, digest, k);
  }
}
