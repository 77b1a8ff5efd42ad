/**
 * I13: the node's own fetches on a server's word. A remote server names where the node should go next — its OAuth
 * resource metadata (`WWW-Authenticate: … resource_metadata=`), the authorization servers that metadata lists, the
 * token endpoint their metadata gives, a redirect — and a tenant's own server could name the node's neighbours that
 * way (`127.0.0.1:<port>/internal-admin`, a cloud's metadata service), from outside every sandbox. So every connection
 * such a fetch makes is checked where it is made (undici's connector): to an origin the config names (a server's
 * `url`, a credential's `issuer`), as written; to any other, only when every address its name resolves to is public,
 * and then to the address that was checked, so a name that resolves inward the next time (DNS rebinding) gets nowhere.
 * The ranges are a sandbox's egress's (I3, ../common/addresses.ts): loopback, link-local, private, the
 * node's own. A refused fetch sends nothing; its words say only that it was refused, never whether anything answered.
 */
import dns from 'node:dns';
import net from 'node:net';
import type { FetchLike } from '@modelcontextprotocol/client';
import { Agent, buildConnector, fetch as undiciFetch } from 'undici';
import type { LoadedConfig } from '../common/config';
import { isRemote } from '../common/config';
import { ownAddresses, refusedAddress } from '../common/addresses';
import { causesOf } from './errors';

/** A connection the node refused to make on a server's word (I13). */
export class FetchRefused extends Error {
  override name = 'FetchRefused';
  constructor(readonly origin: string) {
    super(`the node does not fetch ${origin} on a server's word: it is not an origin the config names (I13)`);
  }
}

/** An origin as compared here: `https://auth.example.com:443`. */
function originOf(protocol: string, hostname: string, port: string | number | undefined): string {
  const p = port ? String(port) : protocol === 'https:' ? '443' : '80';
  return `${protocol}//${hostname.toLowerCase()}:${p}`;
}

/** The origins a config names for the node to fetch: every remote server's url, every credential's issuer. */
export function namedOrigins(config: Pick<LoadedConfig, 'servers' | 'tenants'>): Set<string> {
  const urls = [
    ...Object.values(config.servers).flatMap((s) => (isRemote(s) ? [s.url] : [])),
    ...Object.values(config.tenants).flatMap((t) =>
      Object.values(t.credentials).flatMap((c) => (c.oauth ? [c.oauth.issuer] : [])),
    ),
  ];
  return new Set(
    urls.map((u) => {
      const url = new URL(u);
      return originOf(url.protocol, url.hostname, url.port);
    }),
  );
}

/** The addresses `host` leads to now: itself for an address, what the node's resolver says for a name. */
function addressesOf(host: string): Promise<string[]> {
  if (net.isIP(host)) return Promise.resolve([host]);
  return new Promise((resolve, reject) =>
    dns.lookup(host, { all: true }, (err, list) => (err ? reject(err) : resolve(list.map((a) => a.address)))),
  );
}

/**
 * A fetch whose every connection — its redirects' too — goes only where I13 lets it: an origin of `named`, or a public
 * address. One dispatcher (a pool of keep-alive connections) per guard.
 */
export function guardedFetch(named: ReadonlySet<string>): FetchLike {
  const connect = buildConnector({ timeout: 10_000 });
  const agent = new Agent({
    connect: (opts, callback) => {
      const origin = originOf(opts.protocol, opts.hostname, opts.port);
      if (named.has(origin)) return connect(opts, callback);
      const host = opts.hostname.replace(/^\[(.*)\]$/, '$1');
      addressesOf(host).then(
        (addresses) => {
          const own = ownAddresses();
          if (addresses.length === 0 || addresses.some((a) => refusedAddress(a, own))) {
            callback(new FetchRefused(origin), null);
            return;
          }
          // The address checked, not the name again: TLS still checks the name (`host` gives its servername).
          connect({ ...opts, hostname: addresses[0] }, callback);
        },
        (err: Error) => callback(err, null),
      );
    },
  });
  return ((url: string | URL, init?: RequestInit) =>
    undiciFetch(url, { ...(init as object), dispatcher: agent } as Parameters<typeof undiciFetch>[1])) as FetchLike;
}

/** The refusal in a fetch's failure (fetch wraps it: `TypeError: fetch failed`, its cause), if it is one. */
export function refusalOf(err: unknown): FetchRefused | undefined {
  for (const e of causesOf(err, 4)) if (e instanceof FetchRefused) return e;
  return undefined;
}
