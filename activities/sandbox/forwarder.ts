/**
 * Runs inside a sandbox whose network is its own (I3): listens on 127.0.0.1 ports there and leads each connection to
 * a Unix socket of the node (bound into the sandbox), then runs the sandbox's program and exits as it exits. Usage:
 * `node forwarder.js PORT=SOCKET... -- COMMAND ARGS...`. It holds no authority: the node decides, on its side of each
 * socket, what a connection may reach. Node's built-ins only: this one file is all of oz0 a sandbox sees.
 */
import { spawn } from 'node:child_process';
import net from 'node:net';
import os from 'node:os';

/** How long a side whose peer broke off still stands, unread, before it is reset: its answer is read meanwhile. */
const RESET_AFTER_MS = 500;

function main(): void {
  const argv = process.argv.slice(2);
  const split = argv.indexOf('--');
  if (split < 1 || split === argv.length - 1) {
    process.stderr.write('oz0 forwarder: usage: forwarder.js PORT=SOCKET... -- COMMAND ARGS...\n');
    process.exit(125);
  }
  const routes = argv.slice(0, split).map((spec) => {
    const at = spec.indexOf('=');
    return { port: Number(spec.slice(0, at)), socket: spec.slice(at + 1) };
  });
  const [command, ...args] = argv.slice(split + 1);
  // The node stops a sandbox by signalling its process group: this process waits for the program's own end.
  for (const signal of ['SIGTERM', 'SIGINT', 'SIGHUP'] as const) process.on(signal, () => undefined);
  const servers = routes.map(({ socket }) => net.createServer((inside) => splice(inside, net.connect(socket))));
  let listening = 0;
  for (const [i, server] of servers.entries()) {
    server.once('error', (err) => {
      process.stderr.write(`oz0 forwarder: cannot listen on 127.0.0.1:${routes[i].port}: ${err.message}\n`);
      process.exit(125);
    });
    server.listen(routes[i].port, '127.0.0.1', () => {
      if (++listening === servers.length) run(command, args, servers);
    });
  }
  if (servers.length === 0) run(command, args, servers);
}

/**
 * Both ways between two sockets. A side's clean close ends the other once what was on its way is written. A broken
 * one — its peer closed with data unread, as a server that stopped reading does after an answer such as a 413 for a
 * body too large — is passed on as the server itself would: the other side is no longer read (a client still
 * sending blocks, and reads the answer), and is reset a moment later.
 */
export function splice(a: net.Socket, b: net.Socket): void {
  const link = (from: net.Socket, to: net.Socket) => {
    let broken = false;
    from.on('data', (chunk: Buffer) => {
      if (to.destroyed || to.writableEnded) return;
      if (!to.write(chunk)) {
        from.pause();
        // On again once the other side drains, or is gone (what comes after is then dropped).
        const resume = () => {
          to.off('drain', resume);
          to.off('close', resume);
          from.resume();
        };
        to.on('drain', resume);
        to.on('close', resume);
      }
    });
    from.on('error', () => (broken = true));
    from.once('close', () => {
      if (to.destroyed) return;
      if (!broken) return void to.end();
      to.pause();
      setTimeout(() => {
        try {
          to.resetAndDestroy();
        } catch {
          to.destroy();
        }
      }, RESET_AFTER_MS).unref();
    });
  };
  link(a, b);
  link(b, a);
}

/** The program, on this process's stdio; its end is this process's end (a signal as 128 + its number). */
function run(command: string, args: string[], servers: net.Server[]): void {
  const child = spawn(command, args, { stdio: 'inherit' });
  child.once('error', (err) => {
    process.stderr.write(`oz0 forwarder: cannot start ${command}: ${err.message}\n`);
    process.exit(127);
  });
  child.once('exit', (code, signal) => {
    for (const server of servers) server.close();
    process.exit(code ?? 128 + (signal ? os.constants.signals[signal] : 0));
  });
}

// Run as a program inside a sandbox; the node imports splice() from here too.
if (require.main === module) main();
