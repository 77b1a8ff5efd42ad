/**
 * The nodes' config of the local cluster is compose's own, deploy/oz0.cluster.json, with its container paths
 * moved to this machine, so the two cannot drift apart: `/app/` is the project, `/var/lib/oz0/ledger/` (compose's
 * `ledger` volume, shared by every node) the cluster's one ledger folder, the rest of `/var/lib/oz0` the node's own
 * state folder, `http://search:8931/mcp` the search server started here and `http://s3:8333` its payload store. One ledger for every node, as in
 * compose: the plugin kit's key store is safe across processes, so a write a lost node made is answered from it on
 * the node that takes the call over.
 * The plugin servers also get OZ0_RECEIVED_LOG, so the checks can tell which node's server received a call (a
 * sandboxed one may not see a plugin's files, I2: it keeps its own in its folder).
 */
import fs from 'node:fs';
import path from 'node:path';
import { parseConfig } from '../../common/config';

/** Where compose mounts its `ledger` volume, shared by every node. */
const LEDGER_VOLUME = '/var/lib/oz0/ledger/';
/** D4: where compose mounts its `keys` volume, the payload keys every node shares. */
const KEYS_VOLUME = '/var/lib/oz0/keys';

export interface NodePlace {
  address: string;
  namespace: string;
  /** This node's own state folder (sandboxes, the reader's seen-keys file). */
  state: string;
  /** The cluster's one ledger (compose's LEDGER_FILE on the `ledger` volume); its folder stands for the volume. */
  ledgerFile: string;
  search: string;
  /** D2: the S3 API of the cluster's payload store (compose's `http://s3:8333`). */
  s3: string;
  /** D4: the cluster's one key folder (compose's `keys` volume). */
  keys: string;
  /** Given to every stdio server as OZ0_RECEIVED_LOG: the example servers record there what they received. */
  receivedLog: string;
}

function moved(value: unknown, swap: (s: string) => string): unknown {
  if (typeof value === 'string') return swap(value);
  if (Array.isArray(value)) return value.map((v) => moved(v, swap));
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, moved(v, swap)]));
  }
  return value;
}

/** deploy/oz0.cluster.json for a node on this machine; checked by parseConfig before anyone uses it. */
export function nodeConfig(root: string, place: NodePlace): Record<string, unknown> {
  const compose = JSON.parse(fs.readFileSync(path.join(root, 'deploy', 'oz0.cluster.json'), 'utf8')) as object;
  const swap = (s: string) => {
    if (s.startsWith(LEDGER_VOLUME)) return path.join(path.dirname(place.ledgerFile), s.slice(LEDGER_VOLUME.length));
    if (s === KEYS_VOLUME) return place.keys;
    if (s === 'http://search:8931/mcp') return place.search;
    if (s === 'http://s3:8333') return place.s3;
    if (s.startsWith('/app/')) return path.join(root, s.slice('/app/'.length));
    if (s === '/var/lib/oz0' || s.startsWith('/var/lib/oz0/')) return place.state + s.slice('/var/lib/oz0'.length);
    return s;
  };
  const input = moved(compose, swap) as Record<string, unknown> & {
    temporal: object;
    servers: Record<string, { env?: Record<string, string>; url?: string; sandbox?: unknown }>;
  };
  input.temporal = { ...input.temporal, address: place.address, namespace: place.namespace };
  for (const server of Object.values(input.servers)) {
    if (!server.url && !server.sandbox) server.env = { ...server.env, OZ0_RECEIVED_LOG: place.receivedLog };
  }
  parseConfig(input);
  return input;
}
