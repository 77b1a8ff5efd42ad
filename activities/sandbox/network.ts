/**
 * The node's side of a sandbox's network (I3). A sandbox with a network of its own has only loopback; what it is
 * granted reaches it through Unix sockets the node listens on, bound into it at /run/oz0, one per destination, and
 * led to 127.0.0.1 ports inside by its forwarder (./forwarder.ts):
 * - its gateway (a harness's `OZ0_MCP_URL`, the same address inside as on the node);
 * - each granted loopback `host:port` (a server on the node's loopback), at the same port inside;
 * - an HTTP proxy for every other granted `host:port`, named in `HTTPS_PROXY` and `HTTP_PROXY` as tools expect: it
 *   tunnels (CONNECT) or forwards (absolute-form requests) to granted destinations only.
 * The node decides on its side of each socket; nothing inside the sandbox holds authority.
 */
import dns from 'node:dns';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import type { NetworkGrant } from '../../common/config';
import type { Logger } from '../../common/logger';
import { ownAddresses, refusedAddress } from '../../common/addresses';
import { splice } from './forwarder';
import type { Listener } from './plan';

/** Connections one sandbox may hold open through the node at once: a flood costs the sandbox, not the node. */
export const MAX_CONNECTIONS = 256;

/** The first port tried inside a sandbox for its proxy. */
const PROXY_PORT = 3128;

export interface Grant {
  host: string;
  port: number;
  /** A name that may resolve to a private address (`"private": true`). */
  private?: boolean;
}

/** Refusals a sandbox's network keeps for the attempts that ask (the latest ones). */
const REFUSALS_KEPT = 20;

export interface NetworkRequest {
  /** `host:port` destinations (SandboxConfig.network), validated by the config's schema. */
  grants: NetworkGrant[];
  /** `node.dnsServers`: where granted names are asked; the node's own resolver when unset. */
  dnsServers?: string[];
  /** A harness's gateway: the port it has on 127.0.0.1, how it takes a connection, and how many at once (I10). */
  gateway?: { port: number; accept(socket: net.Socket): void; maxConnections?: number };
  /** Owner of the sockets, so the sandbox's user may connect (the node's own uid when unset). */
  owner?: { uid: number; gid: number };
  logger: Logger;
  who: string;
}

/** `host:port` → its parts; the host without IPv6 brackets, lower case. */
export function parseGrant(value: string): Grant {
  const at = value.lastIndexOf(':');
  return {
    host: value
      .slice(0, at)
      .replace(/^\[|\]$/g, '')
      .toLowerCase(),
    port: Number(value.slice(at + 1)),
  };
}

/** A grant of the config, as the network holds it. */
export function grantOf(grant: NetworkGrant): Grant {
  return typeof grant === 'string' ? parseGrant(grant) : { ...parseGrant(grant.to), private: grant.private };
}

/** A loopback name or address: reached at the same port inside, without the proxy. */
export function isLoopbackHost(host: string): boolean {
  return host === 'localhost' || host === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/** A granted name that resolved inward (./addresses.ts): the connection is not made, and the attempt says why. */
export class RefusedName extends Error {
  override name = 'RefusedName';
}

export class SandboxNetwork {
  /** What the sandbox's forwarder listens on, each led to a socket in {@link runDir}. */
  readonly listeners: Listener[] = [];
  /** Environment for the sandboxed program: the proxy's address, when it has one. */
  readonly env: Record<string, string> = {};
  private readonly servers: net.Server[] = [];
  private readonly open = new Set<Duplex>();
  /** What the network refused lately, with when: an attempt's note takes those made while it ran. */
  private readonly refusals: Array<{ at: number; words: string }> = [];
  private readonly resolver?: dns.promises.Resolver;
  /**
   * The plain-HTTP forwarding's connections, kept alive per grant of this sandbox: never Node's global agent, whose
   * sockets any sandbox granted the same host:port would be handed, one checked under a `"private": true` grant
   * among them.
   */
  private readonly agents = new Map<string, http.Agent>();

  private constructor(
    readonly runDir: string,
    private readonly req: NetworkRequest,
  ) {
    if (req.dnsServers) {
      this.resolver = new dns.promises.Resolver({ timeout: 5000, tries: 2 });
      this.resolver.setServers(req.dnsServers);
    }
  }

  /** I3: what this sandbox's network refused since `since` (ms), in words, each once. */
  refusedSince(since: number): string[] {
    return [...new Set(this.refusals.filter((r) => r.at >= since).map((r) => r.words))];
  }

  private refused(words: string): void {
    this.refusals.push({ at: Date.now(), words });
    if (this.refusals.length > REFUSALS_KEPT) this.refusals.shift();
    this.req.logger.warn({ sandbox: this.req.who, refused: words }, 'sandbox: its network refused a destination');
  }

  /** Listens on the sandbox's sockets: its gateway, its loopback grants and, for other grants, its proxy. */
  static async open(req: NetworkRequest): Promise<SandboxNetwork> {
    // Short: a Unix socket's path has room for 107 bytes.
    const runDir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-net-'));
    fs.chmodSync(runDir, 0o711);
    const network = new SandboxNetwork(runDir, req);
    try {
      await network.listenAll();
    } catch (err) {
      await network.close();
      throw err;
    }
    return network;
  }

  private async listenAll(): Promise<void> {
    const { req } = this;
    const grants = req.grants.map(grantOf);
    const taken = new Set<number>();
    if (req.gateway) {
      const { accept, maxConnections = MAX_CONNECTIONS } = req.gateway;
      const held = new Set<net.Socket>();
      await this.listen('gateway.sock', req.gateway.port, (socket) => {
        // I10: the harness's connections to its gateway at once; past them, 503 and closed.
        if (held.size >= maxConnections) {
          socket.end(
            `HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n`,
          );
          return;
        }
        held.add(socket);
        socket.once('close', () => held.delete(socket));
        accept(socket);
      });
      taken.add(req.gateway.port);
    }
    for (const grant of grants.filter((g) => isLoopbackHost(g.host))) {
      if (taken.has(grant.port)) continue;
      taken.add(grant.port);
      await this.listen(`port-${grant.port}.sock`, grant.port, (inside) => this.tunnel(inside, grant, Buffer.alloc(0)));
    }
    const remote = grants.filter((g) => !isLoopbackHost(g.host));
    if (remote.length === 0) return;
    let port = PROXY_PORT;
    while (taken.has(port)) port++;
    const proxy = http.createServer((request, response) => this.forward(request, response, grants));
    proxy.on('connect', (request: http.IncomingMessage, inside: Duplex, head: Buffer) => {
      // The socket is the tunnel's now, not the HTTP server's: a reset from the sandbox costs it, never the node.
      inside.on('error', () => inside.destroy());
      const grant = this.granted(request.url ?? '', grants);
      if (!grant) return refuse(inside, request.url ?? '');
      this.tunnel(inside, grant, head, true);
    });
    proxy.on('clientError', (_err, socket) => socket.destroy());
    await this.listen('proxy.sock', port, (socket) => proxy.emit('connection', socket));
    const url = `http://127.0.0.1:${port}`;
    const direct = 'localhost,127.0.0.1,::1';
    Object.assign(this.env, {
      HTTPS_PROXY: url,
      HTTP_PROXY: url,
      https_proxy: url,
      http_proxy: url,
      NO_PROXY: direct,
      no_proxy: direct,
      // Node 22.21 and 24 take the proxy from the environment with this set; Node 20's fetch does not (docs/isolation.md).
      NODE_USE_ENV_PROXY: '1',
    });
  }

  /** One Unix socket in the run folder, for the forwarder's listener on `port` inside. */
  private async listen(name: string, port: number, onConnection: (socket: net.Socket) => void): Promise<void> {
    const server = net.createServer((socket) => {
      // Whatever the sandbox does to its end of a socket, the node hears it here and nowhere else.
      socket.on('error', () => socket.destroy());
      if (this.open.size >= MAX_CONNECTIONS) return socket.destroy();
      this.track(socket);
      onConnection(socket);
    });
    const file = path.join(this.runDir, name);
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(file, () => resolve());
    });
    this.servers.push(server);
    fs.chmodSync(file, 0o600);
    if (this.req.owner) fs.chownSync(file, this.req.owner.uid, this.req.owner.gid);
    this.listeners.push({ port, socket: name });
  }

  private track(stream: Duplex): void {
    this.open.add(stream);
    stream.once('close', () => this.open.delete(stream));
  }

  /** The grant a `host:port` (a CONNECT target, or an absolute URL's) names, if any. */
  private granted(target: string, grants: Grant[]): Grant | undefined {
    const asked = parseGrant(target);
    return grants.find((g) => g.host === asked.host && g.port === asked.port);
  }

  /** A connection to a granted destination, both ways; a granted name may not resolve inward (./addresses.ts). */
  private tunnel(inside: Duplex, grant: Grant, head: Buffer, proxied = false): void {
    const outside = net.connect({ host: grant.host, port: grant.port, lookup: this.guardedLookup(grant) });
    this.track(outside);
    let connected = false;
    outside.once('connect', () => {
      connected = true;
      if (proxied) inside.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      if (head.length) outside.write(head);
      splice(inside as net.Socket, outside);
    });
    outside.once('error', (err) => {
      if (connected) return;
      const to = `${grant.host}:${grant.port}`;
      if (err instanceof RefusedName) this.refused(err.message);
      else
        this.req.logger.info({ sandbox: this.req.who, to, err: err.message }, 'sandbox: a granted destination failed');
      if (proxied) inside.end(`HTTP/1.1 502 Bad Gateway\r\n\r\noz0: ${to}: ${err.message}\n`);
      else inside.destroy();
    });
    inside.on('error', () => outside.destroy());
  }

  /** A plain `http://` request in absolute form, to a granted destination. */
  private forward(request: http.IncomingMessage, response: http.ServerResponse, grants: Grant[]): void {
    let url: URL;
    try {
      url = new URL(request.url ?? '');
    } catch {
      response.writeHead(400).end('oz0: a proxy request names an absolute http:// URL\n');
      return;
    }
    const grant = url.protocol === 'http:' ? this.granted(`${url.hostname}:${url.port || 80}`, grants) : undefined;
    if (!grant) {
      this.req.logger.info({ sandbox: this.req.who, to: url.host }, 'sandbox: a destination not granted was refused');
      response.writeHead(403).end(`oz0: ${url.host} is not granted to this sandbox (sandbox.network)\n`);
      return;
    }
    const headers = { ...request.headers };
    for (const name of Object.keys(headers)) if (/^proxy-/i.test(name)) delete headers[name];
    const out = http.request(
      {
        host: grant.host,
        port: grant.port,
        method: request.method,
        path: `${url.pathname}${url.search}`,
        headers,
        lookup: this.guardedLookup(grant),
        agent: this.agentFor(grant),
      },
      (answer) => {
        response.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(response);
      },
    );
    out.on('error', (err) => {
      if (err instanceof RefusedName) this.refused(err.message);
      if (!response.headersSent) response.writeHead(502);
      response.end(`oz0: ${url.host}: ${err.message}\n`);
    });
    request.pipe(out);
  }

  private agentFor(grant: Grant): http.Agent {
    const key = `${grant.host}:${grant.port}:${grant.private === true}`;
    let agent = this.agents.get(key);
    if (!agent) this.agents.set(key, (agent = new http.Agent({ keepAlive: true })));
    return agent;
  }

  async close(): Promise<void> {
    for (const agent of this.agents.values()) agent.destroy();
    for (const stream of this.open) stream.destroy();
    await Promise.all(this.servers.map((s) => new Promise<void>((resolve) => s.close(() => resolve()))));
    fs.rmSync(this.runDir, { recursive: true, force: true });
  }

  /**
   * The lookup of a granted name: every address it resolves to (the node's resolver, or node.dnsServers), refused
   * whole when any of them leads inward. A grant by address never comes here (Node connects to an address as it is),
   * nor does a loopback grant's name: both are what the config's author wrote.
   */
  private guardedLookup(grant: Grant): net.LookupFunction {
    return ((hostname: string, options: dns.LookupOptions, callback: (...args: unknown[]) => void) => {
      this.lookupAll(hostname).then(
        (list) => {
          const own = isLoopbackHost(grant.host) ? undefined : ownAddresses();
          const why = own && list.map((a) => refusedAddress(a.address, own, grant.private)).find(Boolean);
          if (why) {
            const hint = why.private ? ', which a name reaches only when its grant says "private": true' : '';
            const words = `${grant.host}:${grant.port} was refused: it resolves to ${why.words}${hint} (sandbox.network)`;
            return callback(new RefusedName(words));
          }
          if (options.all) return callback(null, list);
          callback(null, list[0].address, list[0].family);
        },
        (err: Error) => callback(err),
      );
    }) as net.LookupFunction;
  }

  private async lookupAll(hostname: string): Promise<dns.LookupAddress[]> {
    const { resolver } = this;
    if (!resolver) return dns.promises.lookup(hostname, { all: true });
    const [v4, v6] = await Promise.allSettled([resolver.resolve4(hostname), resolver.resolve6(hostname)]);
    const list = [
      ...(v4.status === 'fulfilled' ? v4.value.map((address) => ({ address, family: 4 })) : []),
      ...(v6.status === 'fulfilled' ? v6.value.map((address) => ({ address, family: 6 })) : []),
    ];
    if (list.length) return list;
    throw v4.status === 'rejected' ? v4.reason : new Error(`${hostname} has no address`);
  }
}

function refuse(inside: Duplex, target: string): void {
  inside.end(`HTTP/1.1 403 Forbidden\r\n\r\noz0: ${target} is not granted to this sandbox (sandbox.network)\n`);
}
