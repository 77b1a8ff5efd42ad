/**
 * SPEC R4: why a remote server's call could not be authorized, as facts the attempt reads (error classes, never
 * flags), and the HTTP traffic of authorization watched at the edge (zod on the authorization server's answers).
 *
 * Every request of a tenant's connection but those to the MCP endpoint itself is authorization traffic: the Protected
 * Resource Metadata (RFC 9728), the authorization server's metadata (RFC 8414) and its token endpoint. Their failures
 * are said here, in words, before the SDK would make them an OAuth error of its own (whose `invalid_client` it would
 * retry at once, printing to the console) or take a server that is down for one with no metadata.
 */
import {
  AuthorizationServerMismatchError,
  InsufficientScopeError,
  IssuerMismatchError,
  OAuthError,
  SdkErrorCode,
  SdkHttpError,
  UnauthorizedError,
} from '@modelcontextprotocol/client';
import type { FetchLike } from '@modelcontextprotocol/client';
import { z } from 'zod';
import { IDEMPOTENCY_KEY_META, parseRetryAfter } from '../model/protocol';
import { SecretUnavailable } from '../common/credentials';
import { refusalOf } from './guarded-fetch';
import type { AuthorizationEnd } from './errors';

/**
 * A failure of authorization, in words, before anything of a call reached its server. A TypeError, as fetch's own
 * network failures are: the SDK's discovery passes those on, where it takes any other error for a missing document.
 */
export class AuthorizationError extends TypeError {
  override name = 'AuthorizationError';
  constructor(
    message: string,
    /** SPEC B: the authorization server was down or busy; the call is busy, not failed. */
    readonly busy = false,
    /** Its Retry-After, in seconds. */
    readonly retryAfter?: number,
  ) {
    super(message);
  }
}

/** The token endpoint refused the client (RFC 6749 §5.2): `invalid_client`, `invalid_scope`, `invalid_target`, … */
export class TokenRefused extends AuthorizationError {
  override name = 'TokenRefused';
  constructor(
    readonly code: string,
    readonly description: string | undefined,
    readonly status: number,
  ) {
    super(`the authorization server refused the token request: ${code}${description ? ` (${description})` : ''}`);
  }
}

/** The authorization server issued a token for another resource than the server's (RFC 8707): it was not sent. */
export class TokenForAnotherResource extends AuthorizationError {
  override name = 'TokenForAnotherResource';
}

/** An OAuth error answer (RFC 6749 §5.2), as far as oz0 reads one. */
const OAuthErrorAnswerSchema = z.object({
  error: z.string().regex(/^[\x20-\x21\x23-\x5b\x5d-\x7e]{1,100}$/),
  error_description: z.string().max(1000).optional(),
});

/** A token answer (RFC 6749 §5.1): only its shape is checked here; the SDK reads it. */
const TokenAnswerSchema = z.object({
  access_token: z.string().min(1),
  token_type: z.string().min(1),
  expires_in: z.number().positive().optional(),
  scope: z.string().optional(),
});

/** What a server's `WWW-Authenticate` challenge said last, for the note of a refusal. */
export interface Challenge {
  status: number;
  error?: string;
  description?: string;
  scope?: string;
}

/** The words of a description from outside: printable, one line, bounded. */
function plain(text: string | undefined, max = 200): string | undefined {
  if (!text) return undefined;
  const one = text.replace(/[^\x20-\x7e]+/g, ' ').trim();
  return one.length > max ? `${one.slice(0, max - 1)}…` : one || undefined;
}

/** A field of a `WWW-Authenticate: Bearer …` challenge. */
function challengeField(header: string, name: string): string | undefined {
  const match = new RegExp(`${name}=(?:"([^"]*)"|([^\\s,]+))`).exec(header);
  return plain(match?.[1] ?? match?.[2]);
}

/** The challenge of a 401 or 403 answer. */
export function challengeOf(response: Response): Challenge {
  const header = response.headers.get('www-authenticate') ?? '';
  return {
    status: response.status,
    ...(challengeField(header, 'error') && { error: challengeField(header, 'error') }),
    ...(challengeField(header, 'error_description') && { description: challengeField(header, 'error_description') }),
    ...(challengeField(header, 'scope') && { scope: challengeField(header, 'scope') }),
  };
}

/** The idempotency key of a `tools/call` POST body (K1), to tell its attempt that its request was refused once. */
function keyOf(body: unknown): string | undefined {
  if (typeof body !== 'string' || !body.includes(IDEMPOTENCY_KEY_META)) return undefined;
  try {
    const key = (JSON.parse(body) as { params?: { _meta?: Record<string, unknown> } }).params?._meta?.[
      IDEMPOTENCY_KEY_META
    ];
    return typeof key === 'string' ? key : undefined;
  } catch {
    return undefined;
  }
}

/** Whether a request is a token request: a form POST with a grant type (how the SDK sends every one). */
function isTokenRequest(init: RequestInit | undefined): boolean {
  return init?.method === 'POST' && init.body instanceof URLSearchParams && init.body.has('grant_type');
}

/**
 * The fetch of a tenant's authorization traffic (everything but `endpoint`): a server that cannot be reached or that
 * is busy is said so (busy, SPEC B), a refused token request says the authorization server's error, and an answer
 * that is not JSON or not a token is refused here — never echoed: it may hold a token.
 */
export function authorizationFetch(
  endpoint: URL,
  base: FetchLike,
  onChallenge: (c: Challenge, key: string | undefined) => void,
): FetchLike {
  return async (url, init) => {
    const target = new URL(String(url));
    if (target.href === endpoint.href) {
      const response = await base(url, init);
      if (response.status === 401 || response.status === 403) onChallenge(challengeOf(response), keyOf(init?.body));
      return response;
    }
    const where = target.origin;
    const token = isTokenRequest(init);
    let response: Response;
    try {
      response = await base(url, init);
    } catch (err) {
      if (init?.signal?.aborted) throw err;
      // I13: refused before anything was sent; said so, and nothing of what the address would have done.
      const refused = refusalOf(err);
      if (refused) throw new AuthorizationError(refused.message);
      const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
      throw new AuthorizationError(`the authorization server at ${where} was not reachable (${cause})`, true);
    }
    if (response.status === 429 || response.status >= 500) {
      await response.body?.cancel();
      const retryAfter = parseRetryAfter(response.headers.get('retry-after'));
      const wait = retryAfter === undefined ? '' : `, Retry-After ${Math.round(retryAfter)} s`;
      throw new AuthorizationError(
        `the authorization server at ${where} answered HTTP ${response.status}${wait} to ${target.pathname}`,
        true,
        retryAfter,
      );
    }
    if (token && !response.ok) {
      const answer = OAuthErrorAnswerSchema.safeParse(await response.json().catch(() => undefined));
      if (!answer.success) {
        throw new AuthorizationError(
          `the authorization server at ${where} answered HTTP ${response.status} to the token request, not an OAuth error`,
        );
      }
      throw new TokenRefused(answer.data.error, plain(answer.data.error_description), response.status);
    }
    if (!response.ok) return response;
    const body = await response
      .clone()
      .json()
      .catch(() => undefined);
    if (token && !TokenAnswerSchema.safeParse(body).success) {
      await response.body?.cancel();
      throw new AuthorizationError(`the authorization server at ${where} answered the token request with no token`);
    }
    if (!token && (body === null || typeof body !== 'object')) {
      await response.body?.cancel();
      throw new AuthorizationError(
        `${target.href} answered HTTP ${response.status} with something that is not JSON metadata`,
      );
    }
    return response;
  };
}

/** Who was being authorized where, for the words of a failure. */
export interface Authorizing {
  tenant: string;
  server: string;
  clientId: string;
  /** The config's field of the tenant's credential, e.g. `tenants.acme.credentials.tickets`. */
  field: string;
  /** The server's last challenge, if any. */
  challenge?: Challenge;
}

/** A challenge in the trace's words: ` (HTTP 401 invalid_token: the token was revoked)`. */
export function challengeWords(c: Challenge | undefined): string {
  if (!c) return '';
  const what = [c.error, c.description].filter(Boolean).join(': ');
  return ` (HTTP ${c.status}${what ? ` ${what}` : ''})`;
}

/**
 * R4: the end of an attempt whose authorization failed, or undefined for any other failure. Read from the error and
 * its causes: the classes of this file, of the credentials, and the MCP SDK's own.
 */
export function authorizationEnd(err: unknown, who: Authorizing): AuthorizationEnd | undefined {
  const prefix = `authorization of ${who.tenant} at ${who.server} (client ${who.clientId})`;
  for (let e = err, depth = 0; e instanceof Error && depth < 6; e = e.cause, depth++) {
    if (e instanceof TokenRefused) {
      const hint =
        e.code === 'invalid_client'
          ? `: a wrong secret or key, or a client the authorization server does not know (${who.field}.oauth)`
          : e.code === 'invalid_scope'
            ? ': the client may not have the scopes the server asks for'
            : '';
      return { busy: false, note: `${prefix} failed: ${e.message}${hint}` };
    }
    if (e instanceof AuthorizationError) {
      return e.busy
        ? {
            busy: true,
            note: `${prefix} is busy: ${e.message}`,
            ...(e.retryAfter !== undefined && { retryAfter: e.retryAfter }),
          }
        : { busy: false, note: `${prefix} failed: ${e.message}` };
    }
    if (e instanceof SecretUnavailable) return { busy: false, note: `${prefix} failed: ${e.message}` };
    if (e instanceof AuthorizationServerMismatchError) {
      return {
        busy: false,
        note: `${prefix} failed: the server names the authorization server ${e.currentIssuer}, but the client is registered with ${e.recordedIssuer} (${who.field}.oauth.issuer): its secret was not sent there`,
      };
    }
    if (e instanceof IssuerMismatchError) return { busy: false, note: `${prefix} failed: ${plain(e.message, 300)}` };
    if (
      e instanceof InsufficientScopeError ||
      (e instanceof SdkHttpError && e.code === SdkErrorCode.ClientHttpForbidden)
    ) {
      return {
        busy: false,
        note: `${prefix} failed: the server still refused the call with a token of the scopes it asked for${challengeWords(who.challenge)}`,
      };
    }
    if (e instanceof SdkHttpError && e.code === SdkErrorCode.ClientHttpAuthentication) {
      return {
        busy: false,
        note: `${prefix} failed: the server refused a fresh token too${challengeWords(who.challenge)}`,
      };
    }
    if (e instanceof UnauthorizedError) {
      return {
        busy: false,
        note: `${prefix} failed: the server answered 401 and no token could be had${challengeWords(who.challenge)}`,
      };
    }
    if (e instanceof OAuthError) return { busy: false, note: `${prefix} failed: ${e.code}: ${plain(e.message)}` };
    if (e instanceof SdkHttpError && (e.status === 401 || e.status === 403)) {
      return {
        busy: false,
        note: `${prefix} failed: the server refused the tenant's credentials${challengeWords(who.challenge ?? { status: e.status })}`,
      };
    }
  }
  return undefined;
}
