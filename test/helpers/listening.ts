/** A server a test runs as a process of its own, over Streamable HTTP: resolved once it prints `listening <url>`. */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';

export interface ListeningServer {
  url: string;
  proc: ChildProcess;
  close(): Promise<void>;
}

export async function startListening(
  command: string,
  args: string[],
  env: Record<string, string>,
): Promise<ListeningServer> {
  const proc = spawn(command, args, {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`${args.join(' ')} did not listen: ${err}`)), 30_000);
    proc.stderr!.on('data', (chunk: Buffer) => {
      err += chunk.toString();
      const found = /listening (\S+)/.exec(err);
      if (found) {
        clearTimeout(timer);
        resolve(found[1]);
      }
    });
    proc.once('exit', (code) => reject(new Error(`${args.join(' ')} exited ${code}: ${err}`)));
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  return {
    url,
    proc,
    async close() {
      proc.kill('SIGTERM');
      // A server may wait for its open streams on SIGTERM (uvicorn does); a test's server has no more to say.
      const timer = setTimeout(() => proc.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    },
  };
}
