/**
 * SPEC R2: one tenant's OAuth client for one remote server, on the MCP SDK's own providers
 * (`ClientCredentialsProvider` for `client_secret_basic`/`_post`, `PrivateKeyJwtProvider` for `private_key_jwt`) and
 * its `auth()`: discovery from the server's `WWW-Authenticate` (RFC 9728) and the authorization server's metadata
 * (RFC 8414), the `resource` parameter (RFC 8707), the scopes the server asks for, step-up on `insufficient_scope`.
 *
 * What this adds around them, as an `OAuthClientProvider` the transport is given:
 * - the node's cache per (tenant, server): one of these lives as long as the node, across its connections; its token
 *   is taken again shortly before it expires (never on disk, never anywhere but this process's memory);
 * - secrets read from their references at each token request (a rotated file is taken then), so the SDK provider is
 *   made again when one changed;
 * - `client_secret_post` when told (the SDK's provider picks basic whenever the server offers it);
 * - a token whose audience is another resource than the one asked for is refused before it is ever sent (R4).
 */
import {
  ClientCredentialsProvider,
  PrivateKeyJwtProvider,
  auth,
  computeScopeUnion,
} from '@modelcontextprotocol/client';
import type {
  FetchLike,
  OAuthClientMetadata,
  OAuthClientProvider,
  OAuthDiscoveryState,
  StoredOAuthClientInformation,
  StoredOAuthTokens,
} from '@modelcontextprotocol/client';
import { createPrivateKey } from 'node:crypto';
import { readSecret } from '../common/credentials';
import type { OAuthCredential } from '../common/credentials';
import { TokenForAnotherResource } from './authorization';
import type { Challenge } from './authorization';

/** A token is taken again this long before it expires: a tenth of its life, at most 60 s. */
export function refreshMarginMs(lifetimeSeconds: number): number {
  return Math.min(60_000, (lifetimeSeconds * 1000) / 10);
}

/** The discovery the SDK did is kept this long, then done again (a server may move to another authorization server). */
export const DISCOVERY_TTL_MS = 60 * 60 * 1000;

/** What the server and its authorization server asked for and gave, for `oz0 plugin test` and the docs' words. */
export interface OAuthSeen {
  resource?: string;
  authorizationServers?: string[];
  scopesSupported?: string[];
  issuer?: string;
  authMethods?: string[];
  /** The scope of the last token request, as the SDK chose it (challenge, metadata, or the config). */
  scopeAsked?: string;
  scopeGranted?: string;
  expiresInSeconds?: number;
  challenge?: Challenge;
}

type SdkProvider = ClientCredentialsProvider | PrivateKeyJwtProvider;

/** The JWS algorithm of a private key, when the config names none. */
function algorithmOf(pem: string): string {
  const key = createPrivateKey(pem.trimStart().startsWith('{') ? { key: JSON.parse(pem), format: 'jwk' } : pem);
  if (key.asymmetricKeyType === 'ec') {
    const curve = key.asymmetricKeyDetails?.namedCurve;
    return curve === 'secp384r1' ? 'ES384' : curve === 'secp521r1' ? 'ES512' : 'ES256';
  }
  if (key.asymmetricKeyType === 'ed25519') return 'EdDSA';
  return 'RS256';
}

/** The audiences of a JWT access token, or undefined for an opaque one (a client cannot read those). */
function jwtAudiences(token: string): string[] | undefined {
  const parts = token.split('.');
  if (parts.length !== 3) return undefined;
  try {
    const claims = JSON.parse(Buffer.from(parts[1], 'base64url').toString('utf8')) as { aud?: unknown };
    if (typeof claims.aud === 'string') return [claims.aud];
    if (Array.isArray(claims.aud) && claims.aud.every((a) => typeof a === 'string')) return claims.aud as string[];
    return undefined;
  } catch {
    return undefined;
  }
}

/** The same resource, as RFC 8707 compares them: the URL without its fragment or a trailing slash. */
function sameResource(a: string, b: string): boolean {
  const norm = (u: string) => u.replace(/#.*$/, '').replace(/\/$/, '');
  return norm(a) === norm(b);
}

export class TenantOAuth implements OAuthClientProvider {
  private stored?: { tokens: StoredOAuthTokens; at: number };
  private discovery?: { state: OAuthDiscoveryState; at: number };
  private resource?: string;
  private refreshing?: Promise<void>;
  private sdk?: { secret: string; provider: SdkProvider };
  readonly seen: OAuthSeen = {};

  constructor(
    private readonly config: OAuthCredential,
    private readonly serverUrl: URL,
    /** Where the secrets are read: the node's environment and the config's folder. */
    private readonly where: { env: NodeJS.ProcessEnv; baseDir: string },
    /** The config's field of this credential, e.g. `tenants.acme.credentials.tickets.oauth`. */
    readonly field: string,
    /** The fetch of the authorization traffic (./authorization.ts), for a token taken before it expires. */
    private readonly fetchFn: FetchLike,
  ) {}

  get clientId(): string {
    return this.config.clientId;
  }

  /** The SDK's provider for the secret as it reads now: made again when the secret changed (a rotation). */
  private current(): SdkProvider {
    const { config } = this;
    const ref = config.method === 'private_key_jwt' ? config.privateKey! : config.clientSecret!;
    const field = `${this.field}.${config.method === 'private_key_jwt' ? 'privateKey' : 'clientSecret'}`;
    const secret = readSecret(ref, this.where, field);
    if (this.sdk?.secret === secret) return this.sdk.provider;
    const common = {
      clientId: config.clientId,
      clientName: 'oz0',
      expectedIssuer: config.issuer,
      ...(config.scope && { scope: config.scope }),
    };
    const provider =
      config.method === 'private_key_jwt'
        ? new PrivateKeyJwtProvider({
            ...common,
            privateKey: secret.trimStart().startsWith('{') ? (JSON.parse(secret) as Record<string, unknown>) : secret,
            algorithm: config.algorithm ?? algorithmOf(secret),
          })
        : new ClientCredentialsProvider({ ...common, clientSecret: secret });
    this.sdk = { secret, provider };
    return provider;
  }

  get redirectUrl(): undefined {
    return undefined;
  }

  get clientMetadata(): OAuthClientMetadata {
    return this.current().clientMetadata;
  }

  clientInformation(): StoredOAuthClientInformation {
    const info = this.current().clientInformation();
    // The SDK picks client_secret_basic whenever the server offers it; a client registered for post says so.
    return this.config.method === 'private_key_jwt'
      ? info
      : { ...info, token_endpoint_auth_method: this.config.method };
  }

  /** `private_key_jwt`: a fresh signed assertion for each token request (the SDK's). */
  get addClientAuthentication(): OAuthClientProvider['addClientAuthentication'] {
    const provider = this.current();
    return provider instanceof PrivateKeyJwtProvider ? provider.addClientAuthentication : undefined;
  }

  /**
   * The token request: the scope the SDK chose (the server's challenge, its metadata, or the config), with the scopes
   * the tenant holds now — a new token after a 401 keeps what a step-up won, and costs no second refusal.
   */
  prepareTokenRequest(scope?: string): URLSearchParams {
    const asked = computeScopeUnion(scope, this.stored?.tokens.scope);
    this.seen.scopeAsked = asked;
    return this.current().prepareTokenRequest(asked);
  }

  /**
   * The token for the transport's next request (called with no context before each one): taken again first when it
   * is about to expire and the server's authorization server is known. A refresh that fails while the token still
   * holds keeps it; one that fails after is the request's failure (R4). Before the first token: none, and the
   * server's 401 starts the discovery.
   */
  async tokens(ctx?: unknown): Promise<StoredOAuthTokens | undefined> {
    if (ctx === undefined && this.stored && this.due()) {
      this.refreshing ??= this.refresh().finally(() => (this.refreshing = undefined));
      try {
        await this.refreshing;
      } catch (err) {
        if (this.expired()) {
          this.stored = undefined;
          throw err;
        }
      }
    }
    return this.stored?.tokens;
  }

  private due(): boolean {
    const expires = this.stored?.tokens.expires_in;
    if (expires === undefined || !this.stored) return false;
    return Date.now() >= this.stored.at + expires * 1000 - refreshMarginMs(expires);
  }

  private expired(): boolean {
    const expires = this.stored?.tokens.expires_in;
    return expires !== undefined && this.stored !== undefined && Date.now() >= this.stored.at + expires * 1000;
  }

  /** A new token before this one expires, through the SDK's `auth()` on the discovery it made. */
  private async refresh(): Promise<void> {
    const state = await this.discoveryState();
    if (!state) return;
    await auth(this, {
      serverUrl: this.serverUrl,
      ...(state.resourceMetadataUrl && { resourceMetadataUrl: new URL(state.resourceMetadataUrl) }),
      // The scopes held now: a step-up's are kept.
      ...(this.stored?.tokens.scope && { scope: this.stored.tokens.scope }),
      fetchFn: this.fetchFn,
    });
  }

  /** R4: a JWT for another audience than the resource asked for is refused here, before it is ever sent. */
  saveTokens(tokens: StoredOAuthTokens): void {
    const audiences = jwtAudiences(tokens.access_token);
    const resource = this.resource;
    if (resource && audiences && !audiences.some((a) => sameResource(a, resource))) {
      throw new TokenForAnotherResource(
        `the authorization server issued a token for ${audiences.join(', ')}, not for ${resource} (RFC 8707): it was not sent`,
      );
    }
    this.stored = { tokens, at: Date.now() };
    this.seen.scopeGranted = tokens.scope;
    this.seen.expiresInSeconds = tokens.expires_in;
  }

  saveResourceUrl(resource: string): void {
    this.resource = resource;
  }

  saveDiscoveryState(state: OAuthDiscoveryState): void {
    this.discovery = { state, at: Date.now() };
    const prm = state.resourceMetadata;
    const as = state.authorizationServerMetadata;
    Object.assign(this.seen, {
      ...(prm?.resource && { resource: prm.resource }),
      ...(prm?.authorization_servers && { authorizationServers: prm.authorization_servers }),
      ...(prm?.scopes_supported && { scopesSupported: prm.scopes_supported }),
      ...(as?.issuer && { issuer: as.issuer }),
      ...(as?.token_endpoint_auth_methods_supported && { authMethods: as.token_endpoint_auth_methods_supported }),
    });
  }

  discoveryState(): OAuthDiscoveryState | undefined {
    if (this.discovery && Date.now() - this.discovery.at > DISCOVERY_TTL_MS) this.discovery = undefined;
    return this.discovery?.state;
  }

  /** The server's last `WWW-Authenticate` challenge (401, 403), for the words of a refusal. */
  noteChallenge(challenge: Challenge): void {
    this.seen.challenge = challenge;
  }

  invalidateCredentials(scope: 'all' | 'client' | 'tokens' | 'verifier' | 'discovery'): void {
    if (scope === 'all' || scope === 'tokens') this.stored = undefined;
    if (scope === 'all' || scope === 'discovery') this.discovery = undefined;
  }

  /** Forgets the token and the discovery: the next request starts from the server's 401 (a refused token, a revoke). */
  forget(): void {
    this.invalidateCredentials('all');
  }

  redirectToAuthorization(): void {
    throw new Error('client credentials never redirect to an authorization page');
  }

  saveCodeVerifier(): void {}

  codeVerifier(): string {
    throw new Error('client credentials have no code verifier');
  }
}
