/**
 * A remote ticket desk that knows each tenant by its OAuth client (SPEC R): an MCP server over Streamable HTTP that
 * takes only access tokens its authorization server issued for it, and keeps one desk per client — acme's tickets
 * are not beta's, whoever calls.
 *
 * It is a protected resource as the MCP authorization spec says: its Protected Resource Metadata (RFC 9728) at
 * `/.well-known/oauth-protected-resource/mcp` names its authorization server and scopes; a request without a valid
 * token gets 401 with `WWW-Authenticate: Bearer resource_metadata="…", scope="tickets.read"`; a token must be for
 * this server (its `aud`, RFC 8707) and carry `tickets.read`; `open_ticket` needs `tickets.write` too, and a token
 * without it gets 403 `insufficient_scope` naming both, before the tool runs (the client steps up and sends again).
 *
 *   node dist/examples/tickets.js --http 8932 --issuer http://127.0.0.1:9000
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';
import {
  McpServer,
  OAuthError,
  OAuthErrorCode,
  bearerAuthChallengeResponse,
  getOAuthProtectedResourceMetadataUrl,
  requireBearerAuth,
  requireScopes,
} from '@modelcontextprotocol/server';
import type { AuthInfo } from '@modelcontextprotocol/server';
import { z } from 'zod';
import { McpHttpEndpoint, readJsonBody, replyError, sendResponse, webRequest } from '../mcp/http-server';
import { idempotentWrite, readOnly } from '../plugin';
import { AccessTokenVerifier } from './access-tokens';
import { idempotencyKey, recordReceived } from './common';
import type { HttpHandle, ToolContext } from './common';

export const TICKETS_SCOPES = ['tickets.read', 'tickets.write'] as const;

export interface TicketsOptions {
  /** The issuer of the authorization server whose tokens this server takes; {@link TicketsHandle.setIssuer} later. */
  issuer?: string;
}

export interface TicketsHandle extends HttpHandle {
  /** The authorization server, once it is known (a demo may start it after this server). */
  setIssuer(issuer: string): void;
  /** Every bearer token this server was sent, accepted or not: the tests look for them where they must not be. */
  tokensSeen(): string[];
  /**
   * Refuses from now on every token seen so far, as a server does after a revocation (401 `invalid_token`); with
   * `calls`, for `tools/call` only, as a server that checks its revocation list on calls alone (listings are cheap).
   */
  revokeSeenTokens(scope?: 'all' | 'calls'): void;
  /** Refuses every token with these words from now on (401 `invalid_token`), or none again (undefined). */
  refuseTokens(why: string | undefined): void;
}

interface Ticket {
  id: string;
  title: string;
  key?: string;
}

/** Who called: the OAuth client its token names. */
function clientOf(ctx: ToolContext): string {
  return ctx.http?.authInfo?.clientId ?? 'nobody';
}

/** What the server's record says of the caller: its client and which token (its `jti`, never the token). */
function caller(ctx: ToolContext): { client: string; jti?: string } {
  const jti = (ctx.http?.authInfo?.extra as { jti?: string } | undefined)?.jti;
  return { client: clientOf(ctx), ...(jti && { jti }) };
}

/** One desk per client, shared by every session and request of this server. */
function createDesks() {
  const desks = new Map<string, Ticket[]>();
  const deskOf = (client: string) => {
    let desk = desks.get(client);
    if (!desk) desks.set(client, (desk = []));
    return desk;
  };
  return () => {
    const server = new McpServer({ name: 'oz0-example-tickets', version: '1.0.0' });
    server.registerTool(
      'whoami',
      { description: 'Who this server takes the caller for: its OAuth client and scopes.', ...readOnly() },
      async (ctx) => {
        const auth = ctx.http?.authInfo;
        recordReceived({ tool: 'whoami', key: idempotencyKey(ctx), ...caller(ctx) });
        const who = { client: clientOf(ctx), scopes: auth?.scopes ?? [] };
        return { content: [{ type: 'text', text: `${who.client} (${who.scopes.join(' ')})` }], structuredContent: who };
      },
    );
    server.registerTool(
      'list_tickets',
      { description: "The caller's tickets (its own desk only).", ...readOnly() },
      async (ctx) => {
        const desk = deskOf(clientOf(ctx));
        recordReceived({ tool: 'list_tickets', key: idempotencyKey(ctx), ...caller(ctx) });
        const text = desk.length ? desk.map((t) => `${t.id} ${t.title}`).join('\n') : 'no tickets';
        return {
          content: [{ type: 'text', text }],
          structuredContent: { tickets: desk.map(({ key: _k, ...t }) => t) },
        };
      },
    );
    server.registerTool(
      'open_ticket',
      {
        description: 'Opens a ticket on the caller’s desk; the same key opens it once (needs tickets.write).',
        inputSchema: z.object({ title: z.string().min(1).max(200) }),
        ...idempotentWrite(),
        // 403 insufficient_scope before the handler runs, for a token without tickets.write: the client steps up.
        scopeChallenge: requireScopes(...TICKETS_SCOPES),
      },
      async ({ title }, ctx) => {
        const client = clientOf(ctx);
        const key = idempotencyKey(ctx);
        const desk = deskOf(client);
        const again = key ? desk.find((t) => t.key === key) : undefined;
        recordReceived({ tool: 'open_ticket', key, ...caller(ctx), made: !again });
        const ticket = again ?? { id: `${client}-${desk.length + 1}`, title, ...(key && { key }) };
        if (!again) desk.push(ticket);
        return {
          content: [{ type: 'text', text: `${again ? 'already open' : 'opened'}: ${ticket.id} ${ticket.title}` }],
          structuredContent: { id: ticket.id, title: ticket.title, opened: !again },
        };
      },
    );
    return server;
  };
}

/** The method and key of a JSON-RPC request body, for the record of what was refused. */
function requestOf(body: unknown): { method?: string; key?: unknown } {
  const b = body as { method?: unknown; params?: { _meta?: Record<string, unknown> } } | undefined;
  return {
    ...(typeof b?.method === 'string' && { method: b.method }),
    ...(b?.params?._meta?.['oz0/idempotency_key'] !== undefined && { key: b.params._meta['oz0/idempotency_key'] }),
  };
}

/** Serves the ticket desk at `/mcp` of 127.0.0.1:`port` (0: a free one). */
export async function startTicketsServer(port = 0, opts: TicketsOptions = {}): Promise<TicketsHandle> {
  let issuer = opts.issuer;
  const seen = new Set<string>();
  const revoked = new Set<string>();
  const jtiOf = new Map<string, string>();
  const revokedForCalls = new Set<string>();
  let refuseAll: string | undefined;
  const verifier = new AccessTokenVerifier(
    () => issuer,
    (claims) => refuseAll ?? (claims.jti && revoked.has(claims.jti) ? 'the token was revoked' : undefined),
  );
  const endpoint = new McpHttpEndpoint(createDesks());
  let gate: (request: Request) => Promise<AuthInfo | Response> = async () => new Response(null, { status: 503 });
  let prm = { path: '', document: {} as Record<string, unknown> };
  let resourceMetadataUrl = '';

  const handle = async (req: http.IncomingMessage, res: http.ServerResponse): Promise<void> => {
    const { pathname } = new URL(req.url ?? '/', 'http://localhost');
    if (req.method === 'GET' && (pathname === prm.path || pathname === '/.well-known/oauth-protected-resource')) {
      res.writeHead(200, { 'content-type': 'application/json' });
      return void res.end(JSON.stringify({ ...prm.document, authorization_servers: issuer ? [issuer] : [] }));
    }
    if (pathname !== '/mcp') return replyError(res, 404, -32601, `no MCP endpoint at ${pathname}; use /mcp`);
    const body = req.method === 'POST' ? await readJsonBody(req, res, 4 * 1024 * 1024) : undefined;
    if (req.method === 'POST' && !body) return;
    const request = webRequest(req, res, body?.raw);
    const bearer = /^Bearer (.+)$/i.exec(request.headers.get('authorization') ?? '')?.[1];
    if (bearer) seen.add(bearer);
    const auth = await gate(request);
    if (auth instanceof Response) {
      recordReceived({ event: 'refused', status: auth.status, ...requestOf(body?.value), bearer: Boolean(bearer) });
      return sendResponse(res, auth);
    }
    const jti = (auth.extra as { jti?: string } | undefined)?.jti;
    if (jti) jtiOf.set(auth.token, jti);
    if (jti && revokedForCalls.has(jti) && requestOf(body?.value).method === 'tools/call') {
      const refusal = bearerAuthChallengeResponse(
        new OAuthError(OAuthErrorCode.InvalidToken, 'the token was revoked'),
        {
          requiredScopes: ['tickets.read'],
          resourceMetadataUrl,
        },
      );
      recordReceived({ event: 'refused', status: refusal.status, ...requestOf(body?.value), bearer: true });
      return sendResponse(res, refusal);
    }
    await sendResponse(res, await endpoint.serve(request, body?.value, auth));
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err: unknown) =>
      replyError(res, 500, -32603, err instanceof Error ? err.message : String(err)),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => resolve());
  });
  const bound = (server.address() as AddressInfo).port;
  const url = `http://127.0.0.1:${bound}/mcp`;
  resourceMetadataUrl = getOAuthProtectedResourceMetadataUrl(new URL(url));
  prm = {
    path: new URL(resourceMetadataUrl).pathname,
    document: {
      resource: url,
      scopes_supported: [...TICKETS_SCOPES],
      bearer_methods_supported: ['header'],
      resource_name: 'oz0 example ticket desk',
    },
  };
  gate = requireBearerAuth({
    verifier,
    requiredScopes: ['tickets.read'],
    resourceMetadataUrl,
    expectedResource: new URL(url),
  });

  let closing: Promise<void> | undefined;
  return {
    url,
    port: bound,
    setIssuer(value) {
      issuer = value;
    },
    tokensSeen: () => [...seen],
    refuseTokens(why) {
      refuseAll = why;
    },
    revokeSeenTokens(scope = 'all') {
      for (const token of seen) {
        const jti = jtiOf.get(token);
        if (jti) (scope === 'all' ? revoked : revokedForCalls).add(jti);
      }
    },
    close() {
      closing ??= (async () => {
        await endpoint.close();
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
      })();
      return closing;
    },
  };
}

async function main(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { http: { type: 'string' }, issuer: { type: 'string' } } });
  if (!values.http || !values.issuer) throw new Error('usage: tickets --http PORT --issuer URL');
  const handle = await startTicketsServer(Number(values.http), { issuer: values.issuer });
  process.stderr.write(`listening ${handle.url}\n`);
  const stop = () => void handle.close().finally(() => process.exit(0));
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}

if (require.main === module) {
  main(process.argv.slice(2)).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
