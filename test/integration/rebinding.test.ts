/**
 * I3 (issue 34.4): names that rebind. A granted name that the tenant's own DNS points inward — at the node itself, its
 * private network, a cloud's metadata service — was served by the proxy (`200 Connection Established`): the guard
 * refused loopback and link-local only. Tried here with a DNS server the test controls (test/helpers/dns.ts, named in
 * node.dnsServers) and the hostile server (test/fixtures/hostile.js) through its proxy, both ways (CONNECT and an
 * absolute URI), beside the control: the same web server granted by its address is reached.
 */
import http from 'node:http';
import type net from 'node:net';
import os from 'node:os';
import { callsOf } from '../../model/job';
import type { JobTrace } from '../../model/job';
import type { JobSpec } from '../../model/schemas';
import { fixture, runJob, useTemporal } from '../helpers/temporal';
import { startDns } from '../helpers/dns';
import type { TestDns } from '../helpers/dns';
import { sandboxed } from '../helpers/sandbox';

const temporal = useTemporal();
let dns: TestDns;
let web: http.Server;
/** The node's own address outside loopback, where the web server listens (what a rebinding name aims at). */
const ip = Object.values(os.networkInterfaces())
  .flat()
  .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;
let port = 0;

beforeAll(async () => {
  dns = await startDns({
    'own.test': [ip ?? '127.0.0.1'],
    'private.test': ['10.255.0.1'],
    'mapped.test': ['::ffff:10.255.0.1'],
    'metadata.test': ['169.254.169.254'],
    'cgnat.test': ['100.100.100.200'],
  });
  web = http.createServer((_req, res) => res.end('the node’s own web server'));
  await new Promise<void>((resolve) => web.listen(0, ip, () => resolve()));
  port = (web.address() as net.AddressInfo).port;
});
afterAll(async () => {
  web?.close();
  await dns?.close();
});

const skip = ip ? test : test.skip;

skip('I3: a granted name its DNS points at the node, its private network or the metadata service is refused, CONNECT and absolute URI alike, and the attempt says what and why; the same server granted by its address is reached (the control)', async () => {
  const names = ['own.test', 'private.test', 'mapped.test', 'metadata.test', 'cgnat.test'];
  const grants = [...names.map((n) => `${n}:${n === 'own.test' ? port : 80}`), `${ip}:${port}`];
  const config = temporal.config({
    node: { dnsServers: [dns.address] },
    servers: {
      box: {
        command: 'node',
        args: [fixture('hostile.js'), 'server'],
        sandbox: sandboxed({ network: grants }),
      },
    },
  });
  const through = Object.fromEntries(grants.map((g) => [g.replace(/:\d+$/, ''), `http://${g}/`]));
  const { trace } = await runJob(temporal, config, {
    tenant: 'acme',
    steps: [{ call: 'box.escape', args: { through } }],
  } satisfies JobSpec);
  const [call] = callsOf(trace as JobTrace);
  const { tries } = call.result.structuredContent as { tries: Record<string, { reached: boolean; detail: string }> };
  // The control: by address, both ways.
  expect(tries[`tunnel ${ip}`]).toMatchObject({ reached: true, detail: expect.stringContaining('own web server') });
  expect(tries[`forward ${ip}`]).toMatchObject({ reached: true, detail: expect.stringContaining('own web server') });
  // By name, refused both ways: the proxy answers 502 saying why.
  for (const name of names) {
    expect([name, tries[`tunnel ${name}`].reached]).toEqual([name, false]);
    expect([name, tries[`forward ${name}`].detail]).toEqual([name, expect.stringMatching(/^HTTP 502 .*was refused/)]);
  }
  // The test's DNS was asked: the refusals are of its answers, not of names that never resolved.
  expect(new Set(dns.asked)).toEqual(new Set(names));
  // The attempt's note says each, with the address and what it is.
  const note = call.attempts[0].note ?? '';
  const said = (grant: string, why: string) => `${grant} was refused: it resolves to ${why} (sandbox.network)`;
  const privately = ', which a name reaches only when its grant says "private": true';
  expect(note).toContain(said(`own.test:${port}`, `${ip}, an address of the node itself`));
  expect(note).toContain(said('private.test:80', `10.255.0.1, a private address (RFC 1918)${privately}`));
  expect(note).toContain(
    said('mapped.test:80', `::ffff:10.255.0.1 (10.255.0.1), a private address (RFC 1918)${privately}`),
  );
  expect(note).toContain(
    said('metadata.test:80', '169.254.169.254, a link-local address (where cloud metadata services answer)'),
  );
  expect(note).toContain(
    said('cgnat.test:80', `100.100.100.200, a shared address (100.64.0.0/10, RFC 6598)${privately}`),
  );
});
