/** The Temporal Web UI, from the UI server's Go module (its assets are embedded), pointed at the local frontend. */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

export interface UiServer {
  url: string;
  stop(): Promise<void>;
}

export async function startUi(opts: {
  binary: string;
  dir: string;
  port: number;
  temporalAddress: string;
  namespace: string;
  logFile: string;
  /** D5: the approvals inbox's codec server (`<inbox>/codec`), called with the person's sign-in cookie. */
  codecEndpoint?: string;
}): Promise<UiServer> {
  // The UI server reads <config dir>/<env>.yaml; JSON is YAML to it.
  fs.mkdirSync(opts.dir, { recursive: true });
  const url = `http://127.0.0.1:${opts.port}`;
  fs.writeFileSync(
    path.join(opts.dir, 'oz0.yaml'),
    JSON.stringify({
      temporalGrpcAddress: opts.temporalAddress,
      host: '127.0.0.1',
      port: opts.port,
      enableUi: true,
      defaultNamespace: opts.namespace,
      cors: { allowOrigins: [url], cookieInsecure: true },
      // Local and offline: no news feed fetched from the internet.
      disableNewsFetch: true,
      refreshInterval: '1m',
      ...(opts.codecEndpoint ? { codec: { endpoint: opts.codecEndpoint, includeCredentials: true } } : {}),
    }),
  );
  const out = fs.openSync(opts.logFile, 'a');
  const child: ChildProcess = spawn(opts.binary, ['--root', opts.dir, '--config', '.', '--env', 'oz0', 'start'], {
    stdio: ['ignore', out, out],
    detached: true,
  });
  fs.closeSync(out);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const deadline = Date.now() + 30_000;
  for (;;) {
    if (child.exitCode !== null)
      throw new Error(`the Temporal UI server exited ${child.exitCode}: see ${opts.logFile}`);
    const up = await fetch(`${url}/api/v1/settings`).then(
      (r) => r.ok,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`the Temporal UI server did not answer at ${url}: see ${opts.logFile}`);
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  return {
    url,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
