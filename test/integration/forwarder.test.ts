/**
 * The forwarder a sandbox whose network is its own runs (SPEC I3, I7): oz0's native one (native/forwarder, Go), built
 * by the node, and the Node.js one it falls back to where Go is missing. Their contract, tried on the binary itself: a
 * connection to a loopback port reaches the node's Unix socket, both ways and half-closed; the program's exit status
 * and signal are the forwarder's; the node's SIGTERM to the group reaches the program, not the forwarder; a port it
 * cannot take is exit 125 with the reason. Then both inside bubblewrap, under the sandbox's system-call filter, as a
 * harness runs them, beside the node saying which one it runs.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { parseConfig } from '../../common/config';
import type { LoadedConfig } from '../../common/config';
import { Isolation } from '../../activities/sandbox';
import {
  NATIVE_FORWARDER,
  builtCopyProblem,
  forwarderCommand,
  forwarderDir,
  forwarderSources,
  nodeForwarder,
  provideForwarder,
  sourceDigest,
} from '../../activities/sandbox/native-forwarder';
import type { Forwarder } from '../../activities/sandbox/native-forwarder';
import { ROOT, logger, tmpDir } from '../helpers/temporal';
import { sandboxed, writableDir } from '../helpers/sandbox';

const native = provideForwarder();
const forwarders: Array<[string, Forwarder]> = [
  ['native', native],
  ['Node.js', nodeForwarder('the comparison')],
];

/** A Unix socket that answers each connection with what it read, upper-cased, once the other side has ended. */
async function upperSocket(dir: string): Promise<{ socket: string; server: net.Server }> {
  const socket = path.join(dir, 'upper.sock');
  const server = net.createServer({ allowHalfOpen: true }, (c) => {
    const chunks: Buffer[] = [];
    c.on('data', (d: Buffer) => chunks.push(d));
    c.on('end', () => c.end(`${Buffer.concat(chunks).toString().toUpperCase()}|`));
    // A client that went away before the answer (a test of a refused connection): nothing to answer, nothing to fail.
    c.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(socket, resolve));
  return { socket, server };
}

/** A loopback port free a moment ago (the forwarder binds it itself, as it does inside a sandbox). */
async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as net.AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** Runs the forwarder on the node (no sandbox): its exit code or signal and its stderr. */
function runForwarder(
  f: Forwarder,
  args: string[],
): { child: ChildProcess; ended: Promise<{ code: number | null; stderr: string }> } {
  const [command, ...rest] = forwarderCommand(f);
  const child = spawn(command, [...rest, ...args], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let stderr = '';
  child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const ended = new Promise<{ code: number | null; stderr: string }>((resolve) =>
    child.once('close', (code) => resolve({ code, stderr })),
  );
  return { child, ended };
}

/**
 * A Node.js program that sends `text` to 127.0.0.1:port and prints what comes back: half-closed at once (`end`), or
 * once the answer came (`answer`).
 */
function client(port: number, text: string, close: 'end' | 'answer' = 'end'): string[] {
  const js = `const c = require('net').connect(${port}, '127.0.0.1', () => c.${close === 'end' ? 'end' : 'write'}(${JSON.stringify(text)}));
    let got = ''; c.on('data', (d) => { got += d; ${close === 'answer' ? 'c.end();' : ''} }); c.on('close', () => { process.stdout.write(got); process.exit(0); });
    c.on('error', (e) => { process.stdout.write('error ' + e.code); process.exit(0); });`;
  return [process.execPath, '-e', js];
}

test('I7: the node builds the native forwarder from native/forwarder, static, into a folder named by its sources', () => {
  expect(native.kind).toBe('native');
  if (native.kind !== 'native') return;
  expect(native.path).toBe(path.join(forwarderDir(ROOT, sourceDigest(forwarderSources(ROOT))), NATIVE_FORWARDER));
  expect(builtCopyProblem(path.dirname(native.path))).toBeUndefined();
  // Static: no program interpreter (ld.so) in its ELF header, so a sandbox needs nothing but the file.
  expect(fs.readFileSync(native.path).includes('/ld-linux')).toBe(false);
});

describe.each(forwarders)('I3: the %s forwarder', (_name, f) => {
  test('a connection to its port reaches the socket, both ways, the client half-closed first; the program’s exit is its exit', async () => {
    const dir = tmpDir('oz0-forwarder-');
    const { socket, server } = await upperSocket(dir);
    try {
      const port = await freePort();
      const run = runForwarder(f, [`${port}=${socket}`, '--', ...client(port, 'hello through')]);
      let out = '';
      run.child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
      const { code, stderr } = await run.ended;
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      // The answer came after the client's own end: its half-close reached the socket and the way back stayed open.
      if (f.kind === 'native') expect(out).toBe('HELLO THROUGH|');
      // The Node.js one ends a connection's both ways at the first end (Node's allowHalfOpen: false): the client's end
      // reaches the socket, the answer after it is lost.
      else expect(['HELLO THROUGH|', 'error ECONNRESET', '']).toContain(out);
    } finally {
      server.close();
    }
  });

  /** One route, as every sandbox's forwarder has at least one (its gateway or its proxy). */
  const route = async () => `${await freePort()}=/nowhere.sock`;

  test('the program’s exit code and its signal (128 + n) are the forwarder’s', async () => {
    expect((await runForwarder(f, [await route(), '--', '/bin/sh', '-c', 'exit 7']).ended).code).toBe(7);
    expect((await runForwarder(f, [await route(), '--', '/bin/sh', '-c', 'kill -KILL $$']).ended).code).toBe(137);
    const missing = await runForwarder(f, [await route(), '--', '/nonexistent/program']).ended;
    expect(missing.code).toBe(127);
    expect(missing.stderr).toMatch(/^oz0 forwarder: cannot start \/nonexistent\/program: .*(no such file|ENOENT)/i);
  });

  test('the node’s SIGTERM to the sandbox’s group stops the program, which handles it; the forwarder waits and says its status', async () => {
    // A shell cannot trap a signal it was started with ignored: the trap's exit 3 shows the forwarder caught SIGTERM
    // without handing the program an ignored one.
    const loop = 'trap "exit 3" TERM; echo ready; while :; do sleep 0.05; done';
    const run = runForwarder(f, [await route(), '--', '/bin/sh', '-c', loop]);
    await Promise.race([new Promise((resolve) => run.child.stdout!.once('data', resolve)), run.ended]);
    process.kill(-run.child.pid!, 'SIGTERM');
    expect((await run.ended).code).toBe(3);
  });

  test('a port already taken, or a bad command line, is exit 125 with the reason, before the program runs', async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const { port } = taken.address() as net.AddressInfo;
    try {
      const marker = path.join(tmpDir('oz0-forwarder-'), 'ran');
      const run = await runForwarder(f, [`${port}=/nowhere.sock`, '--', '/bin/sh', '-c', `touch ${marker}`]).ended;
      expect(run.code).toBe(125);
      expect(run.stderr).toMatch(
        new RegExp(`^oz0 forwarder: cannot listen on 127\\.0\\.0\\.1:${port}: .*address already in use`, 'i'),
      );
      expect(fs.existsSync(marker)).toBe(false);
    } finally {
      taken.close();
    }
    const usage = await runForwarder(f, ['--', '/bin/true']).ended;
    expect(usage.code).toBe(125);
    expect(usage.stderr).toMatch(/^oz0 forwarder: usage: /);
  });
});

function harnessConfig(stateDir: string): LoadedConfig {
  return {
    ...parseConfig({
      harnesses: { h: { command: 'node', tools: ['*'], sandbox: sandboxed() } },
      node: { stateDir },
    }),
    baseDir: ROOT,
    source: 'test',
  };
}

test.each(forwarders)(
  'I1, I3: the %s forwarder runs in bubblewrap under the sandbox’s system-call filter: the harness inside reaches its gateway through it',
  async (_name, f) => {
    const dir = tmpDir('oz0-forwarder-');
    const config = harnessConfig(dir);
    const isolation = new Isolation(config, logger, undefined, undefined, f);
    const accepted: string[] = [];
    try {
      const port = await freePort();
      const started = await isolation.start({
        who: 'harness "h"',
        field: 'harnesses.h.sandbox',
        command: 'node',
        args: client(port, 'from inside', 'answer').slice(1),
        cwd: writableDir(),
        env: {},
        grants: config.harnesses.h.sandbox,
        tenant: 'acme',
        gateway: {
          port,
          accept: (socket) => {
            socket.setEncoding('utf8');
            socket.once('data', (got: string) => {
              accepted.push(got);
              socket.end('answered|');
            });
          },
        },
      });
      let out = '';
      started.child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
      const code = await new Promise((resolve) => started.child.once('exit', resolve));
      await started.stop(1000);
      // The node's side saw the program's bytes, whatever the forwarder.
      expect(accepted).toEqual(['from inside']);
      expect(code).toBe(0);
      expect(out).toBe('answered|');
    } finally {
      await isolation.close();
    }
  },
);

test('I7: where Go is missing the node runs the Node.js forwarder, and its start line says so and why', () => {
  // A project of its own: the native forwarder's sources and no binary built from them.
  const root = tmpDir('oz0-forwarder-root-');
  fs.cpSync(path.join(ROOT, 'native'), path.join(root, 'native'), { recursive: true });
  const lookup = { root, env: { PATH: '' }, fallbacks: [] };
  const fallback = provideForwarder(lookup);
  expect(fallback).toMatchObject({ kind: 'node', node: process.execPath });
  expect(fallback.kind === 'node' && fallback.why).toMatch(/^Go is not installed .*install Go 1\.22 or later/);
  expect(fs.existsSync(path.join(root, '.tools', 'forwarder'))).toBe(false);
  const lines = new Isolation(harnessConfig(tmpDir()), logger, undefined, undefined, fallback).startupLines();
  expect(lines).toContainEqual({
    level: 'warn',
    text: expect.stringMatching(/^sandbox networks: the Node\.js forwarder \(.*forwarder\.js\): Go is not installed/),
  });
  const nativeLines = new Isolation(harnessConfig(tmpDir()), logger, undefined, undefined, native).startupLines();
  expect(nativeLines).toContainEqual({
    level: 'info',
    text: expect.stringMatching(/^sandbox networks: oz0's native forwarder at .*oz0-forwarder \(Go/),
  });
});

test('I7: a built forwarder changed on disk is built again, never run; changed sources build into a folder of their own', () => {
  const root = tmpDir('oz0-forwarder-root-');
  fs.cpSync(path.join(ROOT, 'native'), path.join(root, 'native'), { recursive: true });
  const first = provideForwarder({ root });
  expect(first.kind).toBe('native');
  if (first.kind !== 'native') return;
  fs.appendFileSync(first.path, 'tampered');
  expect(builtCopyProblem(path.dirname(first.path))).toMatch(/has sha256 .*, not the .* it was built with/);
  const said: string[] = [];
  const again = provideForwarder({ root, log: (line) => said.push(line) });
  expect(again).toEqual(first);
  expect(said[0]).toMatch(/^oz0's native forwarder is not the one it built .*: building it again/);
  fs.appendFileSync(path.join(root, 'native', 'forwarder', 'main.go'), '\n// changed\n');
  const changed = provideForwarder({ root });
  expect(changed.kind === 'native' && path.dirname(changed.path)).not.toBe(path.dirname(first.path));
});
