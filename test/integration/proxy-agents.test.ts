/**
 * I3 (issue 44, also seen): a sandbox's plain-HTTP forwarding keeps its upstream connections to itself. Node's global
 * agent keeps sockets alive by host:port, so two sandboxes granted the same destination — one under `"private": true`,
 * one without — would share what the first one's checked lookup connected. Each sandbox's network has agents of its
 * own: two sandboxes make two connections; one sandbox's second request reuses its own (the control for the count),
 * and the global agent, asked the same way, shares one (the control that the test sees sharing).
 */
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import type { AddressInfo } from 'node:net';
import { SandboxNetwork } from '../../activities/sandbox/network';
import { logger } from '../helpers/temporal';

/** An address of this machine that is not loopback: a grant by address goes through the proxy as written. */
const ip = Object.values(os.networkInterfaces())
  .flat()
  .find((a) => a && a.family === 'IPv4' && !a.internal)?.address;

/** A plain GET through a sandbox's proxy socket, as a program inside sends it (absolute form). */
function viaProxy(network: SandboxNetwork, url: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect(path.join(network.runDir, 'proxy.sock'));
    let got = '';
    socket.on('data', (d: Buffer) => {
      got += d.toString();
      if (/\r\n\r\n[\s\S]*ok$/.test(got)) socket.end();
    });
    socket.on('end', () => resolve(got));
    socket.on('error', reject);
    socket.write(`GET ${url} HTTP/1.1\r\nHost: ${new URL(url).host}\r\n\r\n`);
  });
}

(ip ? test : test.skip)(
  'I3: two sandboxes granted the same destination never share an upstream connection; one sandbox reuses its own, and Node’s global agent would share (the controls)',
  async () => {
    const connections: string[] = [];
    const upstream = http.createServer((_req, res) => res.end('ok'));
    upstream.keepAliveTimeout = 10_000;
    upstream.on('connection', (s: net.Socket) => connections.push(`${s.remotePort}`));
    await new Promise<void>((r) => upstream.listen(0, ip, r));
    const to = `${ip}:${(upstream.address() as AddressInfo).port}`;
    const open = (who: string, grant: string | { to: string; private: true }) =>
      SandboxNetwork.open({ grants: [grant], logger, who });
    const [trusting, plain] = await Promise.all([open('sandbox a', { to, private: true }), open('sandbox b', to)]);
    try {
      expect(await viaProxy(trusting, `http://${to}/`)).toMatch(/^HTTP\/1.1 200/);
      expect(await viaProxy(trusting, `http://${to}/`)).toMatch(/^HTTP\/1.1 200/);
      expect(connections).toHaveLength(1);
      expect(await viaProxy(plain, `http://${to}/`)).toMatch(/^HTTP\/1.1 200/);
      expect(connections).toHaveLength(2);
      // The control: the global agent, asked twice the way the proxy once asked it, hands out one socket.
      const before = connections.length;
      for (let i = 0; i < 2; i++) {
        await new Promise<void>((resolve, reject) =>
          http
            .get(`http://${to}/`, { agent: http.globalAgent }, (res) => res.resume().on('end', resolve))
            .on('error', reject),
        );
      }
      expect(connections.length - before).toBe(1);
    } finally {
      http.globalAgent.destroy();
      await Promise.all([trusting.close(), plain.close()]);
      upstream.closeAllConnections();
      await new Promise<void>((r) => upstream.close(() => r()));
    }
  },
);
