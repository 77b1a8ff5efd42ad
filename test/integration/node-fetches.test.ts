/**
 * I13 (issue 44.8): the node fetches what a tenant's server names only where I13 lets it. A tenant's own remote server
 * answers 401 naming its OAuth resource metadata at an internal address of the node's machine (an "admin" port), as a
 * tenant scanning the node's neighbours would. The node, outside every sandbox, never sends that GET, and the attempt's
 * note is the same whether anything listens there or not — it says the fetch was refused, nothing more. The control:
 * the same internal origin, once the config names it (as another server's url), is fetched.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import { createNode } from '../../worker/node';
import { freePort } from '../../worker/dev-server';
import { logger, uniqueId, useTemporal } from '../helpers/temporal';
import { newClient, oauthCredential } from '../helpers/oauth';
import { guardedFetch, namedOrigins, refusalOf } from '../../mcp/guarded-fetch';

const temporal = useTemporal();

/** An HTTP server on 127.0.0.1 that records each request's path and answers with `answer`. */
async function listen(answer: (req: http.IncomingMessage, res: http.ServerResponse) => void) {
  const seen: string[] = [];
  const server = http.createServer((req, res) => {
    seen.push(`${req.method} ${req.url}`);
    answer(req, res);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { origin, seen, close: () => new Promise<void>((r) => server.close(() => r())) };
}

test('I13: a tenant’s server that names an internal address for its OAuth metadata gets no fetch there, and the same refusal whether anything answers (the control: an origin the config names is fetched)', async () => {
  const admin = await listen((_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ resource: 'internal', secret: 'admin-panel' }));
  });
  let aim = admin.origin;
  const own = await listen((_req, res) => {
    res.writeHead(401, { 'www-authenticate': `Bearer resource_metadata="${aim}/internal-admin-7f3a"` });
    res.end();
  });
  const closed = `http://127.0.0.1:${await freePort()}`;
  const client = await newClient('acme-oz0');
  process.env.OZ0_TEST_NODE_FETCH_SECRET = client.secret;
  const configWith = (extra: object = {}) =>
    temporal.config({
      servers: { own: { url: `${own.origin}/mcp`, credentials: 'per-tenant' }, ...extra },
      tenants: {
        acme: {
          policy: { 'own.*': 'allow' },
          credentials: { own: oauthCredential(client, own.origin, 'env:OZ0_TEST_NODE_FETCH_SECRET') },
        },
      },
    });
  const noteOf = async (config: ReturnType<typeof configWith>) => {
    const node = await createNode({ config, logger });
    const trace: JobTrace = await node.runUntil(async () =>
      (
        await temporal.client.workflow.start('job', {
          taskQueue: config.temporal.taskQueue,
          workflowId: uniqueId('i13'),
          args: [{ tenant: 'acme', steps: [{ call: 'own.anything', args: {} }] }],
        })
      ).result(),
    );
    const [call] = callsOf(trace);
    expect(call.result.isError).toBe(true);
    return call.attempts.map((a) => a.note ?? '').join(' | ');
  };
  try {
    const open = await noteOf(configWith());
    expect(admin.seen).toEqual([]);
    expect(open).toBe(
      `authorization of acme at own (client acme-oz0) failed: the node does not fetch ${admin.origin} on a server's word: it is not an origin the config names (I13); nothing was sent`,
    );
    // Nothing listens there: the same words, but for the port.
    aim = closed;
    const shut = await noteOf(configWith());
    expect(shut.replaceAll(closed, 'X')).toBe(open.replaceAll(admin.origin, 'X'));
    // The control: named by the config (another server's url), the same origin is fetched.
    aim = admin.origin;
    await noteOf(configWith({ panel: { url: `${admin.origin}/mcp` } }));
    expect(admin.seen).toContain('GET /internal-admin-7f3a');
  } finally {
    delete process.env.OZ0_TEST_NODE_FETCH_SECRET;
    await Promise.all([admin.close(), own.close()]);
  }
});

test('I13: the node’s fetch follows a named server’s redirect only where it may: not to a loopback address it does not name, nor to a name that resolves to one (localhost); to a named origin, yes (the control)', async () => {
  const inside = await listen((_req, res) => res.end('internal'));
  const insidePort = new URL(inside.origin).port;
  const named = await listen((req, res) => {
    const to =
      req.url === '/to-named'
        ? `${inside.origin}/ok`
        : req.url === '/by-name'
          ? `http://localhost:${insidePort}/x`
          : `${inside.origin}/x`;
    res.writeHead(302, { location: to });
    res.end();
  });
  try {
    const guarded = guardedFetch(
      namedOrigins({ servers: { s: { url: `${named.origin}/mcp` } as never }, tenants: {} }),
    );
    for (const where of ['/to-address', '/by-name']) {
      const err = await guarded(`${named.origin}${where}`).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(refusalOf(err)?.message).toMatch(
        /^the node does not fetch http:\/\/(127\.0\.0\.1|localhost):\d+ on a server's word/,
      );
    }
    expect(inside.seen).toEqual([]);
    // The control: with the inside origin named too, the redirect is followed.
    const both = guardedFetch(
      namedOrigins({
        servers: { s: { url: `${named.origin}/mcp` } as never, t: { url: `${inside.origin}/mcp` } as never },
        tenants: {},
      }),
    );
    expect(await (await both(`${named.origin}/to-named`)).text()).toBe('internal');
    expect(inside.seen).toEqual(['GET /ok']);
  } finally {
    await Promise.all([inside.close(), named.close()]);
  }
});
