/**
 * I3, I13: which addresses a granted *name* may lead a sandbox to, and the node's own fetches on a server's word
 * (../mcp/guarded-fetch.ts). Whoever answers for a name (the tenant's own DNS, a hosts file) can point it anywhere, so
 * a name outside the node that resolves inward — the node itself, its private network, a cloud's metadata service —
 * is refused, unless the grant names that address itself (a grant by address is connected to as written) or says
 * `"private": true` for the private ranges. Classified by ipaddr.js (its special ranges), IPv4-mapped IPv6 as the
 * IPv4 address it is.
 */
import os from 'node:os';
import ipaddr from 'ipaddr.js';

/** Ranges a name may never reach, in words. */
const NEVER: Record<string, string> = {
  unspecified: 'the unspecified address',
  broadcast: 'the broadcast address',
  multicast: 'a multicast address',
  loopback: 'a loopback address',
  linkLocal: 'a link-local address (where cloud metadata services answer)',
  reserved: 'a reserved address',
  deprecatedSiteLocal: 'a site-local address (fec0::/10)',
  '6to4': 'a 6to4 address (it leads to any IPv4 address)',
  teredo: 'a Teredo address (it leads to any IPv4 address)',
};

/** Ranges a name may reach when its grant says `"private": true`. */
const PRIVATE: Record<string, string> = {
  private: 'a private address (RFC 1918)',
  carrierGradeNat: 'a shared address (100.64.0.0/10, RFC 6598)',
  uniqueLocal: 'a unique local address (fc00::/7)',
};

/** The well-known NAT64 prefix (RFC 6052): its last 32 bits are the IPv4 address it reaches. */
const NAT64 = 'rfc6052';

/** The node's own addresses, each as ipaddr.js writes it; read for every check (interfaces come and go). */
export function ownAddresses(): Set<string> {
  const out = new Set<string>();
  for (const list of Object.values(os.networkInterfaces())) {
    for (const a of list ?? []) if (ipaddr.isValid(a.address)) out.add(ipaddr.process(a.address).toString());
  }
  return out;
}

export interface Refused {
  /** The address and what it is: `10.0.0.5, a private address (RFC 1918)`. */
  words: string;
  /** A private range: `"private": true` in the grant would let the name reach it. */
  private: boolean;
}

/** Why a granted name may not lead to `address`, or undefined when it may. `allowPrivate`: `"private": true`. */
export function refusedAddress(address: string, own: ReadonlySet<string>, allowPrivate = false): Refused | undefined {
  if (!ipaddr.isValid(address)) return { words: `${address}, which is not an address`, private: false };
  let ip = ipaddr.process(address);
  if (ip.kind() === 'ipv6' && ip.range() === NAT64) ip = ipaddr.fromByteArray(ip.toByteArray().slice(12));
  const shown = ip.toString() === address ? address : `${address} (${ip.toString()})`;
  if (own.has(ip.toString())) return { words: `${shown}, an address of the node itself`, private: false };
  const range = ip.range();
  if (NEVER[range]) return { words: `${shown}, ${NEVER[range]}`, private: false };
  if (PRIVATE[range] && !allowPrivate) return { words: `${shown}, ${PRIVATE[range]}`, private: true };
  return undefined;
}
