/**
 * SPEC R's real parts for a test file: the example authorization server (npm's oidc-provider, a process of its own)
 * and the example ticket desk that takes only its tokens, with tenants' clients made for the test, each secret fresh
 * and random so that a grep for it finds only what leaked.
 */
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { newClientKey, newSigningKey, startAuthServer } from '../../examples/auth-server';
import type { AuthClient, AuthServerConfig, RunningAuthServer } from '../../examples/auth-server';
import { startTicketsServer } from '../../examples/tickets';
import type { TicketsHandle } from '../../examples/tickets';
import { tmpDir } from './temporal';

/** A secret nobody could guess, recognisable in a grep. */
export function newSecret(who: string): string {
  return `oz0-secret-${who}-${randomBytes(18).toString('hex')}`;
}

/** A client of the test's authorization server, as the test registers it and as a tenant's config names it. */
export interface TestClient {
  id: string;
  method: 'client_secret_basic' | 'client_secret_post' | 'private_key_jwt';
  /** The secret, or the private key's PEM. */
  secret: string;
  scope: string;
  /** Tokens for this audience instead (an authorization server set up wrong). */
  audience?: string;
}

export async function newClient(
  id: string,
  method: TestClient['method'] = 'client_secret_basic',
  scope = 'tickets.read tickets.write',
): Promise<TestClient & { publicJwk?: Record<string, unknown> }> {
  if (method !== 'private_key_jwt') return { id, method, secret: newSecret(id), scope };
  const key = await newClientKey();
  return { id, method, secret: key.privateKeyPem, scope, publicJwk: key.publicJwk };
}

export interface OAuthWorld {
  as: RunningAuthServer;
  tickets: TicketsHandle;
  /** The authorization server's config, to start it again (same port, same key). */
  asConfig: AuthServerConfig;
  /** Where the tenants' secret files are. */
  dir: string;
  /** Writes a client's secret to a file of its own and says how a config names it (`file:…`). */
  secretFile(name: string, secret: string): string;
  restartAuthServer(): Promise<void>;
  close(): Promise<void>;
}

/** The ticket desk and its authorization server, with these clients registered. */
export async function startOAuthWorld(
  clients: Array<TestClient & { publicJwk?: Record<string, unknown> }>,
  opts: { tokenSeconds?: number; logFile?: string } = {},
): Promise<OAuthWorld> {
  const tickets = await startTicketsServer(0);
  const asConfig: AuthServerConfig = {
    clients: clients.map(
      (c): AuthClient => ({
        client_id: c.id,
        token_endpoint_auth_method: c.method,
        scope: c.scope,
        ...(c.method === 'private_key_jwt' ? { jwks: { keys: [c.publicJwk!] } } : { client_secret: c.secret }),
        ...(c.audience && { audience: c.audience }),
      }),
    ),
    resources: { [tickets.url]: { scope: 'tickets.read tickets.write' } },
    ...(opts.tokenSeconds && { tokenSeconds: opts.tokenSeconds }),
    signingKey: await newSigningKey(),
  };
  let as = await startAuthServer(asConfig, { logFile: opts.logFile });
  tickets.setIssuer(as.issuer);
  const dir = tmpDir('oz0-secrets-');
  return {
    get as() {
      return as;
    },
    tickets,
    asConfig,
    dir,
    secretFile(name, secret) {
      const file = path.join(dir, name);
      fs.writeFileSync(file, `${secret}\n`, { mode: 0o600 });
      return `file:${file}`;
    },
    async restartAuthServer() {
      as = await startAuthServer(asConfig, { port: as.port, logFile: opts.logFile });
    },
    async close() {
      await as.stop();
      await tickets.close();
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** A tenant's credentials for the ticket desk, as `tenants.<t>.credentials.tickets` says them. */
export function oauthCredential(client: TestClient, issuer: string, secretRef: string) {
  return {
    oauth: {
      clientId: client.id,
      method: client.method,
      ...(client.method === 'private_key_jwt' ? { privateKey: secretRef } : { clientSecret: secretRef }),
      issuer,
    },
  };
}

/**
 * A hostile authorization server: its metadata (RFC 8414) is right, its token endpoint answers garbage — an HTML page
 * (`html`), or JSON with no token in it (`no-token`) — with 200 OK. The real one is the positive control.
 */
export async function startBrokenAuthServer(
  mode: 'html' | 'no-token',
): Promise<{ issuer: string; close(): Promise<void> }> {
  const server = http.createServer((req, res) => {
    const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    if (req.method === 'GET' && req.url?.startsWith('/.well-known/')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(
        JSON.stringify({
          issuer,
          token_endpoint: `${issuer}/token`,
          authorization_endpoint: `${issuer}/auth`,
          response_types_supported: ['code'],
          grant_types_supported: ['client_credentials'],
          token_endpoint_auth_methods_supported: ['client_secret_basic'],
        }),
      );
    }
    req.resume();
    req.once('end', () => {
      if (mode === 'html') {
        res.writeHead(200, { 'content-type': 'text/html' });
        return void res.end('<html><body>Welcome to the portal. access_token=not-really</body></html>');
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ token_type: 'Bearer', expires_in: 3600 }));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    issuer: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** A9: the identity provider people sign in to `oz0 inbox` with: its client `oz0-inbox`, back to `inboxUrl`. */
export async function startInboxSignIn(
  inboxUrl: string,
  secret: string,
  people: NonNullable<AuthServerConfig['signIn']>['people'],
): Promise<RunningAuthServer> {
  return startAuthServer({
    clients: [],
    resources: {},
    signingKey: await newSigningKey(),
    signIn: {
      clients: [{ client_id: 'oz0-inbox', client_secret: secret, redirect_uris: [`${inboxUrl}/callback`] }],
      people,
    },
  });
}
