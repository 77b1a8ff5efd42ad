/**
 * The authorization server of the examples, the demo and the tests (SPEC R): npm's `oidc-provider` (OpenID Certified),
 * set up for machine clients only — the client-credentials grant, `client_secret_basic`, `client_secret_post` and
 * `private_key_jwt`, resource indicators (RFC 8707) with access tokens that are JWTs bound to the one resource they
 * were asked for (its `aud`), each carrying the scopes granted. Its clients, resources and signing key come from a
 * JSON file; nothing is kept on disk.
 *
 * It runs as a process of its own (oidc-provider is an ES module, and an authorization server is a service of its
 * own: tests stop it to see a node take it for busy):
 *
 *   node dist/examples/auth-server.js --config auth.json [--port 9000]
 *
 * prints `listening <issuer>` on stderr. {@link startAuthServer} runs it so from code, on a free port.
 */
import { spawn } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import { z } from 'zod';
import { projectRoot } from '../common/paths';

const ScopeSchema = z
  .string()
  .regex(/^[\x21\x23-\x5b\x5d-\x7e]+( [\x21\x23-\x5b\x5d-\x7e]+)*$/, 'space-separated scopes');

const ClientSchema = z.strictObject({
  client_id: z.string().min(1),
  /** For `client_secret_basic` and `client_secret_post`. */
  client_secret: z.string().min(1).optional(),
  token_endpoint_auth_method: z.enum(['client_secret_basic', 'client_secret_post', 'private_key_jwt']),
  /** For `private_key_jwt`: the client's public keys. */
  jwks: z.strictObject({ keys: z.array(z.record(z.string(), z.unknown())).min(1) }).optional(),
  /** The scopes this client may be granted, at most. */
  scope: ScopeSchema,
  /**
   * Every token of this client is for this audience instead of the resource it asked for: an authorization server
   * set up wrong, which a client must not take for the server it called (R4).
   */
  audience: z.url().optional(),
});

export const AuthServerConfigSchema = z.strictObject({
  clients: z.array(ClientSchema),
  /** The protected resources (MCP server URLs) tokens may be asked for, and the scopes each knows. */
  resources: z.record(z.url(), z.strictObject({ scope: ScopeSchema })),
  /** How long an access token lives. */
  tokenSeconds: z.number().int().min(1).max(86_400).default(3600),
  /** The private JWK the tokens are signed with (RS256); kept across a restart so that tokens stay verifiable. */
  signingKey: z.record(z.string(), z.unknown()),
  /**
   * A9: people who sign in (the approvals inbox's), with the authorization code flow and PKCE: its web clients, and
   * the people its sign-in page takes by their login (any password: a test's and the demo's identity provider), each
   * with the claims it vouches for — a verified email, a name, groups.
   */
  signIn: z
    .strictObject({
      clients: z.array(
        z.strictObject({
          client_id: z.string().min(1),
          client_secret: z.string().min(1),
          redirect_uris: z.array(z.url()).min(1),
        }),
      ),
      people: z.array(
        z.strictObject({
          login: z.string().min(1),
          email: z.string().min(3),
          name: z.string().optional(),
          groups: z.array(z.string()).default([]),
        }),
      ),
    })
    .optional(),
});

export type AuthServerConfig = z.input<typeof AuthServerConfigSchema>;
export type AuthClient = z.input<typeof ClientSchema>;

/** The RS256 key an authorization server signs with, as a private JWK. */
export async function newSigningKey(): Promise<Record<string, unknown>> {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return {
    ...privateKey.export({ format: 'jwk' }),
    kid: `oz0-example-${Date.now().toString(36)}`,
    use: 'sig',
    alg: 'RS256',
  };
}

/** A client key pair for `private_key_jwt`: the private key as PKCS#8 PEM (the client's), the public one as a JWK. */
export async function newClientKey(): Promise<{ privateKeyPem: string; publicJwk: Record<string, unknown> }> {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'P-256' });
  return {
    privateKeyPem: privateKey.export({ format: 'pem', type: 'pkcs8' }).toString(),
    publicJwk: { ...publicKey.export({ format: 'jwk' }), alg: 'ES256', use: 'sig' },
  };
}

/** Builds the provider for a config, served at `issuer`. */
async function provider(issuer: string, config: z.infer<typeof AuthServerConfigSchema>) {
  const { default: Provider, errors } = await import('oidc-provider');
  const byClient = new Map(config.clients.map((c) => [c.client_id, c]));
  const allScopes = new Set(
    [...config.clients.map((c) => c.scope), ...Object.values(config.resources).map((r) => r.scope)].flatMap((s) =>
      s.split(' '),
    ),
  );
  const people = new Map((config.signIn?.people ?? []).map((p) => [p.login, p]));
  const oidc = new Provider(issuer, {
    clients: [
      ...config.clients.map(({ audience: _audience, ...c }) => ({
        ...c,
        grant_types: ['client_credentials'],
        response_types: [],
        redirect_uris: [],
      })),
      ...(config.signIn?.clients ?? []).map((c) => ({
        ...c,
        grant_types: ['authorization_code'],
        response_types: ['code' as const],
        token_endpoint_auth_method: 'client_secret_basic' as const,
      })),
    ],
    jwks: { keys: [config.signingKey] },
    scopes: [...allScopes, ...(config.signIn ? ['openid', 'email', 'profile', 'groups'] : [])],
    ...(config.signIn && {
      claims: { openid: ['sub'], email: ['email', 'email_verified'], profile: ['name'], groups: ['groups'] },
      // The ID token carries what was asked for, so a client need not call userinfo.
      conformIdTokenClaims: false,
      findAccount: (_ctx: unknown, id: string) => {
        const person = people.get(id);
        if (!person) return undefined;
        return {
          accountId: id,
          claims: () => ({
            sub: id,
            email: person.email,
            email_verified: true,
            ...(person.name && { name: person.name }),
            groups: person.groups,
          }),
        };
      },
    }),
    features: {
      // Its own sign-in and consent pages (any password), for the people of `signIn` only.
      devInteractions: { enabled: config.signIn !== undefined },
      clientCredentials: { enabled: true },
      introspection: { enabled: true },
      revocation: { enabled: true },
      resourceIndicators: {
        enabled: true,
        // A client that names no resource gets an opaque token for nothing; MCP clients always name one (RFC 8707).
        defaultResource: () => undefined,
        useGrantedResource: () => true,
        getResourceServerInfo: (_ctx, resource, client) => {
          const known = config.resources[resource];
          if (!known) throw new errors.InvalidTarget(`${resource} is not a resource of this server`);
          const audience = byClient.get(client.clientId)?.audience;
          return {
            scope: known.scope,
            ...(audience && { audience }),
            accessTokenTTL: config.tokenSeconds,
            accessTokenFormat: 'jwt',
            jwt: { sign: { alg: 'RS256' } },
          };
        },
      },
    },
    enabledJWA: {
      clientAuthSigningAlgValues: ['RS256', 'PS256', 'ES256', 'EdDSA'],
    },
    clientAuthMethods: ['client_secret_basic', 'client_secret_post', 'private_key_jwt'],
  });
  // Machine clients only; plain http on 127.0.0.1 for the examples (the MCP SDK takes a loopback token endpoint).
  oidc.proxy = false;
  return oidc;
}

/** Serves the authorization server on `port` of 127.0.0.1; resolves with its issuer once it listens. */
export async function serveAuthServer(input: unknown, port = 0): Promise<{ issuer: string; close(): Promise<void> }> {
  const config = AuthServerConfigSchema.parse(input);
  // The provider needs its issuer, which has the port. On a port given (a restart on the same one), it is made before
  // the server listens, so a client sees a refused connection and then the real server, never a half-made one; on a
  // port picked by the system it answers 503 until it is made.
  const serving: { handler?: (req: http.IncomingMessage, res: http.ServerResponse) => void } = {};
  const made = async (at: string) => (serving.handler = (await provider(at, config)).callback());
  if (port !== 0) await made(`http://127.0.0.1:${port}`);
  const server = http.createServer((req, res) => {
    if (serving.handler) return serving.handler(req, res);
    res.writeHead(503).end();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  if (!serving.handler) await made(issuer);
  return {
    issuer,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** An authorization server run as a process of its own by {@link startAuthServer}. */
export interface RunningAuthServer {
  issuer: string;
  /** Its port: a restart (`start` again with `port`) keeps the issuer. */
  port: number;
  /** Stops it (SIGTERM, then SIGKILL); safe to call twice. */
  stop(): Promise<void>;
}

/** Path of this file's compiled entry, which a process of its own runs (from the sources too: a test's). */
function entry(): string {
  return __filename.endsWith('.ts')
    ? path.join(projectRoot(), 'dist', 'examples', 'auth-server.js')
    : path.join(__dirname, 'auth-server.js');
}

/**
 * Starts the authorization server as a process of its own (Node, this file compiled), its config in a file of a
 * folder of its own, and resolves once it listens. `port` 0 picks a free one. Its stderr goes to `logFile` when given.
 */
export async function startAuthServer(
  config: AuthServerConfig,
  opts: { port?: number; logFile?: string } = {},
): Promise<RunningAuthServer> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-auth-'));
  const file = path.join(dir, 'auth.json');
  fs.writeFileSync(file, JSON.stringify(config), { mode: 0o600 });
  const child: ChildProcess = spawn(process.execPath, [entry(), '--config', file, '--port', String(opts.port ?? 0)], {
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const log = opts.logFile ? fs.createWriteStream(opts.logFile, { flags: 'a' }) : undefined;
  let said = '';
  const issuer = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`the authorization server did not start in 30 s: ${said}`)),
      30_000,
    );
    child.stderr!.on('data', (chunk: Buffer) => {
      log?.write(chunk);
      said = (said + chunk.toString()).slice(-4000);
      const match = /^listening (\S+)$/m.exec(said);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the authorization server exited (${signal ?? code}) before it listened: ${said.trim()}`));
    });
  });
  let stopping: Promise<void> | undefined;
  return {
    issuer,
    port: Number(new URL(issuer).port),
    stop() {
      stopping ??= new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        const kill = setTimeout(() => child.kill('SIGKILL'), 5000);
        child.once('exit', () => {
          clearTimeout(kill);
          log?.end();
          fs.rmSync(dir, { recursive: true, force: true });
          resolve();
        });
        child.kill('SIGTERM');
      });
      return stopping;
    },
  };
}

async function main(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { config: { type: 'string' }, port: { type: 'string' } } });
  if (!values.config) throw new Error('usage: auth-server --config FILE [--port N]');
  const port = Number(values.port ?? 0);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new Error(`bad --port: ${values.port}`);
  const running = await serveAuthServer(JSON.parse(fs.readFileSync(values.config, 'utf8')), port);
  process.stderr.write(`listening ${running.issuer}\n`);
  const stop = () => void running.close().finally(() => process.exit(0));
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`auth-server: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
