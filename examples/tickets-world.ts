/**
 * SPEC R as a person first meets it: the ticket desk (./tickets.ts) behind its own authorization server
 * (./auth-server.ts, npm's oidc-provider, a process of its own), with two tenants' OAuth clients — `acme` by
 * `client_secret_basic`, `beta` by `private_key_jwt` — whose secrets are written to files of their own (mode 0600) that
 * a config names by reference (`file:…`). The demo runs it on free ports; run alone it serves until Ctrl-C, so that
 * `oz0 dev` on the repository's oz0.config.json (its `tickets` server) reaches it:
 *
 *   node dist/examples/tickets-world.js [--state .oz0/tickets] [--port 8941] [--auth-port 8940]
 *
 * Each run makes new secrets and a new signing key: a node that kept the last run's token is refused once (401) and
 * takes a new one within the attempt (R2).
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { randomBytes } from 'node:crypto';
import { newClientKey, newSigningKey, startAuthServer } from './auth-server';
import { TICKETS_SCOPES, startTicketsServer } from './tickets';

/** A9: the approvals inbox's client at the same authorization server, when the demo signs people in there. */
export const INBOX_CLIENT = 'oz0-inbox';

/** The OAuth client each example tenant has at the desk's authorization server. */
export const TICKETS_CLIENTS = { acme: 'acme-desk', beta: 'beta-desk' } as const;

export interface TicketsWorld {
  /** The desk's MCP endpoint. */
  url: string;
  /** Its authorization server's issuer. */
  issuer: string;
  /** `tenants.<t>.credentials.tickets` of each example tenant, its secret by reference. */
  credentials: Record<keyof typeof TICKETS_CLIENTS, { oauth: Record<string, string> }>;
  close(): Promise<void>;
}

/**
 * Starts the desk and its authorization server (`port`/`authPort` 0: free ones), writing each tenant's secret to
 * `dir`. The authorization server's log goes to `dir/auth-server.log`.
 */
export async function startTicketsWorld(
  dir: string,
  opts: {
    port?: number;
    authPort?: number;
    /**
     * A9: the approvals inbox signs people in here too (the demo's): its client, redirected to `redirectUri`, and the
     * example approver `ann` (ann@acme.example, any password).
     */
    inbox?: { redirectUri: string; secret: string };
  } = {},
): Promise<TicketsWorld> {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const secretFile = (name: string, secret: string) => {
    const file = path.join(dir, name);
    fs.rmSync(file, { force: true });
    fs.writeFileSync(file, `${secret}\n`, { mode: 0o600 });
    return `file:${file}`;
  };
  const acmeSecret = `oz0-example-${randomBytes(24).toString('hex')}`;
  const betaKey = await newClientKey();
  const tickets = await startTicketsServer(opts.port ?? 0);
  const scope = TICKETS_SCOPES.join(' ');
  let as;
  try {
    as = await startAuthServer(
      {
        clients: [
          {
            client_id: TICKETS_CLIENTS.acme,
            token_endpoint_auth_method: 'client_secret_basic',
            client_secret: acmeSecret,
            scope,
          },
          {
            client_id: TICKETS_CLIENTS.beta,
            token_endpoint_auth_method: 'private_key_jwt',
            jwks: { keys: [betaKey.publicJwk] },
            scope,
          },
        ],
        resources: { [tickets.url]: { scope } },
        signingKey: await newSigningKey(),
        ...(opts.inbox && {
          signIn: {
            clients: [
              { client_id: INBOX_CLIENT, client_secret: opts.inbox.secret, redirect_uris: [opts.inbox.redirectUri] },
            ],
            people: [{ login: 'ann', email: 'ann@acme.example', name: 'Ann', groups: ['acme-support'] }],
          },
        }),
      },
      { port: opts.authPort ?? 0, logFile: path.join(dir, 'auth-server.log') },
    );
  } catch (err) {
    await tickets.close();
    throw err;
  }
  tickets.setIssuer(as.issuer);
  const running = as;
  return {
    url: tickets.url,
    issuer: as.issuer,
    credentials: {
      acme: {
        oauth: {
          clientId: TICKETS_CLIENTS.acme,
          clientSecret: secretFile('acme.secret', acmeSecret),
          issuer: as.issuer,
        },
      },
      beta: {
        oauth: {
          clientId: TICKETS_CLIENTS.beta,
          method: 'private_key_jwt',
          privateKey: secretFile('beta.pem', betaKey.privateKeyPem),
          issuer: as.issuer,
        },
      },
    },
    async close() {
      await tickets.close();
      await running.stop();
    },
  };
}

async function main(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { state: { type: 'string' }, port: { type: 'string' }, 'auth-port': { type: 'string' } },
  });
  const port = (v: string | undefined, fallback: number, name: string) => {
    const n = Number(v ?? fallback);
    if (!Number.isInteger(n) || n < 0 || n > 65535) throw new Error(`--${name}: a port, 0-65535, not ${v}`);
    return n;
  };
  const world = await startTicketsWorld(path.resolve(values.state ?? path.join('.oz0', 'tickets')), {
    port: port(values.port, 8941, 'port'),
    authPort: port(values['auth-port'], 8940, 'auth-port'),
  });
  process.stderr.write(
    `tickets: the desk at ${world.url}, its authorization server at ${world.issuer}\n` +
      `tickets: acme's secret and beta's key written to ${path.dirname(world.credentials.acme.oauth.clientSecret.slice(5))}\n`,
  );
  const stop = () => void world.close().finally(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    process.stderr.write(`tickets-world: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(1);
  });
}
