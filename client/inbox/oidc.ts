/**
 * A9: signing in to the inbox with OpenID Connect, through openid-client (npm, by the author of oidc-provider): the
 * authorization code flow with PKCE, state and nonce, against the operator's identity provider. What the provider
 * vouched for in the ID token (and its userinfo, for a groups claim the token left out) is the person: their subject,
 * their email where the provider says it is verified, and their groups.
 */
import type { InboxConfig } from '../../common/config';
import type { Identity } from '../../common/approvers';

import type * as OpenidClientModule from 'openid-client' with { 'resolution-mode': 'import' };

type OpenidClient = typeof OpenidClientModule;

/** A sign-in under way: what the callback checks the provider's answer against. */
export interface PendingSignIn {
  verifier: string;
  state: string;
  nonce: string;
}

export interface SignIn {
  /** Where the person's browser goes to sign in, and what to keep until they come back. */
  start(redirectUri: string): Promise<{ url: string; pending: PendingSignIn }>;
  /** The provider's answer at the callback (its whole URL), checked; the person it vouched for. */
  finish(callbackUrl: URL, pending: PendingSignIn): Promise<Identity>;
}

function loopback(url: URL): boolean {
  return ['127.0.0.1', 'localhost', '[::1]'].includes(url.hostname);
}

/** The provider's metadata, found once (discovery), and the client the config names. */
export async function oidcSignIn(oidc: InboxConfig['oidc'], clientSecret: string | undefined): Promise<SignIn> {
  const client: OpenidClient = await import('openid-client');
  const issuer = new URL(oidc.issuer);
  // Plain HTTP only to a provider on this machine (a test's, a developer's); any other is HTTPS.
  const insecure = issuer.protocol === 'http:' && loopback(issuer);
  if (issuer.protocol === 'http:' && !insecure)
    throw new Error(`inbox.oidc.issuer ${oidc.issuer}: an identity provider beyond this machine is reached by https`);
  const config = await client.discovery(
    issuer,
    oidc.clientId,
    clientSecret,
    clientSecret === undefined ? client.None() : undefined,
    insecure ? { execute: [client.allowInsecureRequests] } : undefined,
  );
  return {
    async start(redirectUri) {
      const verifier = client.randomPKCECodeVerifier();
      const pending = { verifier, state: client.randomState(), nonce: client.randomNonce() };
      const url = client.buildAuthorizationUrl(config, {
        redirect_uri: redirectUri,
        scope: oidc.scopes,
        code_challenge: await client.calculatePKCECodeChallenge(verifier),
        code_challenge_method: 'S256',
        state: pending.state,
        nonce: pending.nonce,
      });
      return { url: url.href, pending };
    },
    async finish(callbackUrl, pending) {
      const tokens = await client.authorizationCodeGrant(config, callbackUrl, {
        pkceCodeVerifier: pending.verifier,
        expectedState: pending.state,
        expectedNonce: pending.nonce,
        idTokenExpected: true,
      });
      const claims = tokens.claims();
      if (!claims) throw new Error('the identity provider gave no ID token');
      let all: Record<string, unknown> = { ...claims };
      if (!(oidc.groupsClaim in all) && tokens.access_token) {
        const info = await client.fetchUserInfo(config, tokens.access_token, claims.sub).catch(() => undefined);
        if (info) all = { ...info, ...all };
      }
      const groups = all[oidc.groupsClaim];
      const email = typeof all.email === 'string' && all.email_verified === true ? all.email : undefined;
      return {
        issuer: claims.iss,
        subject: claims.sub,
        ...(email && { email }),
        ...(typeof all.name === 'string' && { name: all.name }),
        groups: Array.isArray(groups) ? groups.filter((g): g is string => typeof g === 'string') : [],
      };
    },
  };
}
