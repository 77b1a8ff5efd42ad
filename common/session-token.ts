/**
 * I14: an external session's gateway token. Whoever starts a job (the platform: `startJob`, `oz0 job start`) makes one
 * for each of its external sessions and hands it to the tenant's agent; the job's spec holds only its SHA-256. The
 * agent reaches its session through any node's gateway with `Authorization: Bearer <token>`, speaking plain MCP, and
 * never needs Temporal: the token names its job (so any node finds the session) and proves itself against the digest
 * the job holds, and it opens that session of that job alone. The token itself never reaches Temporal or a log.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { JobIdSchema } from '../model/schemas';

/** How an external session's token begins: `oz0s_<job id, base64url>.<secret>`. */
export const SESSION_TOKEN_PREFIX = 'oz0s_';

/** The SHA-256 of a token, hex: what a job's spec holds (`tokenDigest`). */
export function sessionTokenDigest(token: string): string {
  return createHash('sha256').update(token).digest('hex');
}

/** A new token for an external session of job `jobId`, and its digest. */
export function newSessionToken(jobId: string): { token: string; digest: string } {
  const token = `${SESSION_TOKEN_PREFIX}${Buffer.from(jobId).toString('base64url')}.${randomBytes(32).toString('base64url')}`;
  return { token, digest: sessionTokenDigest(token) };
}

/** The job a token names, or undefined for anything that is not an external session's token. */
export function jobOfSessionToken(token: string): string | undefined {
  const m = /^oz0s_([A-Za-z0-9_-]{1,400})\.[A-Za-z0-9_-]{43}$/.exec(token);
  if (!m) return undefined;
  const jobId = Buffer.from(m[1], 'base64url').toString('utf8');
  return JobIdSchema.safeParse(jobId).success ? jobId : undefined;
}

/** Two digests (hex) alike, compared in constant time. */
export function sameDigest(a: string, b: string): boolean {
  const [x, y] = [Buffer.from(a, 'hex'), Buffer.from(b, 'hex')];
  return x.length === 32 && y.length === 32 && timingSafeEqual(x, y);
}
