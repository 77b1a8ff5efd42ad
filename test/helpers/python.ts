/**
 * The Python examples in tests: the project's venv (made by test/global-setup.ts through worker/python.ts), their
 * paths, and one of them served over Streamable HTTP as a process of its own.
 */
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import path from 'node:path';
import { ROOT } from './temporal';

/** The venv's interpreter; undefined (and the tests that need it skipped, saying why) when it could not be had. */
export const python = process.env.OZ0_TEST_PYTHON;

/** Why the Python tests are skipped, for their titles. */
export const pythonMissing = process.env.OZ0_TEST_PYTHON_MISSING ?? 'no OZ0_TEST_PYTHON';

/** `test` when the venv is there; else every such test is skipped, its title saying why. */
export const withPython: jest.It = python ? test : (test.skip as jest.It);

export function pythonExample(name: string): string {
  return path.join(ROOT, 'examples', 'python', `${name}.py`);
}

export interface PythonHttp {
  url: string;
  proc: ChildProcess;
  close(): Promise<void>;
}

/** Serves an example over Streamable HTTP on a free port (`--http 0`), resolved once it says where it listens. */
export async function servePythonHttp(name: string, env: Record<string, string>): Promise<PythonHttp> {
  const proc = spawn(python!, [pythonExample(name), '--http', '0'], {
    env: { PATH: process.env.PATH ?? '', ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let err = '';
    const timer = setTimeout(() => reject(new Error(`${name}.py did not listen: ${err}`)), 30_000);
    proc.stderr!.on('data', (chunk: Buffer) => {
      err += chunk.toString();
      const found = /listening (\S+)/.exec(err);
      if (found) {
        clearTimeout(timer);
        resolve(found[1]);
      }
    });
    proc.once('exit', (code) => reject(new Error(`${name}.py exited ${code}: ${err}`)));
  });
  const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()));
  return {
    url,
    proc,
    async close() {
      proc.kill('SIGTERM');
      // uvicorn waits for open streams on SIGTERM; a test's server has no more to say.
      const timer = setTimeout(() => proc.kill('SIGKILL'), 3000);
      await exited;
      clearTimeout(timer);
    },
  };
}
