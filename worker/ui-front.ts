/**
 * D5 on the dev server: the Temporal CLI's dev server runs its Web UI with a codec endpoint (`--ui-codec-endpoint`)
 * but cannot tell it to send the person's cookie to another origin (the UI's `includeCredentials` setting has no
 * flag there). So `oz0 dev` and the demo put this front on the UI's public port: `/oz0/codec/*` goes to the approvals
 * inbox's codec server (same origin for the browser, so the inbox's sign-in cookie — cookies are per host, not per
 * port — comes along), everything else to the real UI on a port of its own. The inbox's cookie never reaches the UI,
 * and no other origin's page may use the codec path.
 */
import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { proxy } from 'hono/proxy';

/** The path the UI's codec endpoint names on the front. */
export const CODEC_PATH = '/oz0/codec';
/** The inbox's session cookie (client/inbox/server.ts). */
const INBOX_COOKIE = 'oz0_inbox';

export interface UiFront {
  url: string;
  close(): Promise<void>;
}

function cookies(header: string | undefined, keep: (name: string) => boolean): string | undefined {
  const kept = (header ?? '')
    .split(';')
    .map((c) => c.trim())
    .filter((c) => c && keep(c.includes('=') ? c.slice(0, c.indexOf('=')) : c));
  return kept.length ? kept.join('; ') : undefined;
}

/** Serves the front on `ip:port`: the real UI at `ui`, the codec server of the inbox at `inbox`. */
export async function startUiFront(opts: { ip: string; port: number; ui: string; inbox: string }): Promise<UiFront> {
  const own = `http://${opts.ip}:${opts.port}`;
  const app = new Hono();
  app.all(`${CODEC_PATH}/*`, async (c) => {
    const origin = c.req.header('Origin');
    if (origin && origin !== own) return c.json({ error: `only the Temporal UI at ${own} may use this path` }, 403);
    if (c.req.method !== 'POST') return c.body(null, 405);
    const url = new URL(c.req.url);
    const target = `${opts.inbox}/codec${url.pathname.slice(CODEC_PATH.length)}${url.search}`;
    const cookie = cookies(c.req.header('Cookie'), (name) => name === INBOX_COOKIE);
    try {
      const res = await fetch(target, {
        method: 'POST',
        headers: {
          'Content-Type': c.req.header('Content-Type') ?? 'application/json',
          ...(c.req.header('X-Namespace') ? { 'X-Namespace': c.req.header('X-Namespace')! } : {}),
          ...(cookie ? { Cookie: cookie } : {}),
        },
        body: c.req.raw.body,
        duplex: 'half',
        redirect: 'manual',
      } as RequestInit);
      return new Response(res.body, {
        status: res.status,
        headers: { 'Content-Type': res.headers.get('Content-Type') ?? 'application/json', 'Cache-Control': 'no-store' },
      });
    } catch (err) {
      const why = (err as Error & { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
      return c.json(
        {
          error: `the approvals inbox at ${opts.inbox} did not answer (${why}): start \`oz0 inbox\` and sign in there to read payloads decoded`,
        },
        502,
      );
    }
  });
  app.all('*', (c) => {
    const url = new URL(c.req.url);
    return proxy(`${opts.ui}${url.pathname}${url.search}`, {
      ...c.req,
      headers: {
        ...c.req.header(),
        cookie: cookies(c.req.header('Cookie'), (name) => name !== INBOX_COOKIE),
        host: undefined,
      },
    });
  });
  const server = serve({ fetch: app.fetch, hostname: opts.ip, port: opts.port });
  await new Promise<void>((resolve, reject) => {
    server.once('listening', () => resolve());
    server.once('error', reject);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://${opts.ip}:${port}`,
    close: () =>
      new Promise((resolve) => {
        (server as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
        server.close(() => resolve());
      }),
  };
}
