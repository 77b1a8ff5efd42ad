/**
 * The Python examples in tests: the project's venv (made by test/global-setup.ts through worker/python.ts), their
 * paths, and one of them served over Streamable HTTP as a process of its own.
 */
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { startListening } from './listening';
import type { ListeningServer } from './listening';
import { ROOT } from './temporal';

/** The venv's interpreter; undefined (and the tests that need it skipped, saying why) when it could not be had. */
export const python = process.env.OZ0_TEST_PYTHON;

/** Why the Python tests are skipped, for their titles. */
export const pythonMissing = process.env.OZ0_TEST_PYTHON_MISSING ?? 'no OZ0_TEST_PYTHON';

/** `test` when the venv is there; else every such test is skipped, its title saying why. */
export const withPython: jest.It = python ? test : (test.skip as jest.It);

/** Why the tests of the agent on the OpenAI Agents SDK are skipped, if they are (its package is in the venv's pins). */
export const agentsSdkMissing = !python
  ? pythonMissing
  : (() => {
      try {
        execFileSync(python, ['-c', 'import agents.mcp'], { stdio: 'ignore', timeout: 60_000 });
        return '';
      } catch {
        return `${python} cannot import agents.mcp (PyPI openai-agents)`;
      }
    })();

/** `test` when the OpenAI Agents SDK for Python is in the venv; else skipped, its title saying why. */
export const withAgentsSdk: jest.It = agentsSdkMissing ? (test.skip as jest.It) : test;

export function pythonExample(name: string): string {
  return path.join(ROOT, 'examples', 'python', `${name}.py`);
}

export type PythonHttp = ListeningServer;

/** Serves an example over Streamable HTTP on a free port (`--http 0`), resolved once it says where it listens. */
export function servePythonHttp(name: string, env: Record<string, string>): Promise<PythonHttp> {
  return startListening(python!, [pythonExample(name), '--http', '0'], env);
}
