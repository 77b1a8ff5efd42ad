/**
 * How a protected example server checks a bearer token: a JWT access token (RFC 9068) signed by its authorization
 * server, read with node:crypto against the server's published keys (its `jwks_uri`). A server of your own would use
 * a JOSE library; jose is an ES module only, which the tests' CommonJS (Jest) cannot load in-process, so the example
 * does the few checks itself: the signature (RS256), `typ`, `iss`, `exp`, and hands `aud` and `scope` on for the MCP
 * SDK's bearer gate to compare with this server's URL and a tool's scopes.
 */
import crypto from 'node:crypto';
import type { KeyObject } from 'node:crypto';
import { OAuthError, OAuthErrorCode } from '@modelcontextprotocol/server';
import type { AuthInfo, OAuthTokenVerifier } from '@modelcontextprotocol/server';
import { z } from 'zod';

const HeaderSchema = z.object({ alg: z.literal('RS256'), typ: z.string().optional(), kid: z.string().optional() });

const ClaimsSchema = z.object({
  iss: z.string(),
  aud: z.union([z.string(), z.array(z.string())]),
  exp: z.number(),
  iat: z.number().optional(),
  jti: z.string().optional(),
  client_id: z.string(),
  scope: z.string().default(''),
});

export type AccessTokenClaims = z.infer<typeof ClaimsSchema>;

function part<T>(schema: z.ZodType<T>, text: string | undefined, what: string): T {
  try {
    return schema.parse(JSON.parse(Buffer.from(text ?? '', 'base64url').toString('utf8')));
  } catch {
    throw new OAuthError(OAuthErrorCode.InvalidToken, `the token's ${what} is not what an access token has`);
  }
}

/**
 * Verifies the JWT access tokens of the authorization server at `issuer()` (read when a token comes: a demo starts
 * its servers in either order). `refused(token)` lets a test say a token is revoked.
 */
export class AccessTokenVerifier implements OAuthTokenVerifier {
  private keys?: { issuer: string; byKid: Map<string, KeyObject>; at: number };

  constructor(
    private readonly issuer: () => string | undefined,
    private readonly refused: (claims: AccessTokenClaims) => string | undefined = () => undefined,
  ) {}

  async verifyAccessToken(token: string): Promise<AuthInfo> {
    const issuer = this.issuer();
    if (!issuer)
      throw new OAuthError(OAuthErrorCode.ServerError, 'this server does not know its authorization server yet');
    const [h, p, s] = token.split('.');
    const header = part(HeaderSchema, h, 'header');
    if (header.typ !== undefined && header.typ.toLowerCase() !== 'at+jwt')
      throw new OAuthError(OAuthErrorCode.InvalidToken, `a ${header.typ} is not an access token`);
    const key = await this.key(issuer, header.kid);
    const signed = crypto.verify('sha256', Buffer.from(`${h}.${p}`), key, Buffer.from(s ?? '', 'base64url'));
    if (!signed)
      throw new OAuthError(OAuthErrorCode.InvalidToken, 'the token is not signed by the authorization server');
    const claims = part(ClaimsSchema, p, 'payload');
    if (claims.iss !== issuer)
      throw new OAuthError(OAuthErrorCode.InvalidToken, `the token was issued by ${claims.iss}`);
    if (claims.exp * 1000 <= Date.now()) throw new OAuthError(OAuthErrorCode.InvalidToken, 'the token has expired');
    const why = this.refused(claims);
    if (why) throw new OAuthError(OAuthErrorCode.InvalidToken, why);
    const audiences = Array.isArray(claims.aud) ? claims.aud : [claims.aud];
    return {
      token,
      clientId: claims.client_id,
      scopes: claims.scope.split(' ').filter(Boolean),
      expiresAt: claims.exp,
      // The SDK's gate compares this with the server's own URL (expectedResource): a token for another is refused.
      resource: new URL(audiences[0]),
      extra: { jti: claims.jti, audiences },
    };
  }

  /** The authorization server's key `kid`, from its JWKS; read again when a key is not known (a new signing key). */
  private async key(issuer: string, kid: string | undefined): Promise<KeyObject> {
    const known = () => (this.keys?.issuer === issuer ? this.keys.byKid.get(kid ?? '') : undefined);
    if (known()) return known()!;
    if (!this.keys || this.keys.issuer !== issuer || Date.now() - this.keys.at > 1000) {
      const discovery = (await (await fetch(`${issuer}/.well-known/openid-configuration`)).json()) as {
        jwks_uri: string;
      };
      const jwks = (await (await fetch(discovery.jwks_uri)).json()) as { keys: Array<Record<string, unknown>> };
      const byKid = new Map<string, KeyObject>();
      for (const jwk of jwks.keys) {
        if (jwk.kty === 'RSA')
          byKid.set(String(jwk.kid ?? ''), crypto.createPublicKey({ key: jwk as crypto.JsonWebKey, format: 'jwk' }));
      }
      this.keys = { issuer, byKid, at: Date.now() };
    }
    const key = known();
    if (!key)
      throw new OAuthError(
        OAuthErrorCode.InvalidToken,
        `the token names key ${kid}, which the authorization server does not publish`,
      );
    return key;
  }
}
