/**
 * The project's own Python for the Python examples and their tests: a venv in `.tools/python/` with the MCP Python SDK
 * (and the OpenAI Agents SDK, for the agent harness on it) at the versions `examples/python/requirements.txt` pins,
 * made with the machine's `python3 -m venv` and pip (PyPI).
 * `OZ0_PYTHON` names another interpreter that already has them. Run directly, it installs and prints the path.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { projectRoot } from '../common/paths';

/** The venv's folder. */
export function pythonVenv(root = projectRoot()): string {
  return path.join(root, '.tools', 'python');
}

/** The pinned requirements the venv is made from; a copy kept in the venv says what it holds. */
export function requirementsFile(root = projectRoot()): string {
  return path.join(root, 'examples', 'python', 'requirements.txt');
}

export interface PythonOptions {
  env?: NodeJS.ProcessEnv;
  root?: string;
  /** Make or update the venv when it is missing or holds other versions (default true). */
  install?: boolean;
  log?: (line: string) => void;
}

/** The interpreter to run the Python examples with, or why there is none. */
export type PythonFound = { python: string } | { missing: string };

function runs(python: string, args: string[]): boolean {
  try {
    execFileSync(python, args, { stdio: 'ignore', timeout: 60_000 });
    return true;
  } catch {
    return false;
  }
}

export function findPython(opts: PythonOptions = {}): PythonFound {
  const env = opts.env ?? process.env;
  const log = opts.log ?? (() => undefined);
  if (env.OZ0_PYTHON) {
    return runs(env.OZ0_PYTHON, ['-c', 'import mcp.server.mcpserver'])
      ? { python: env.OZ0_PYTHON }
      : { missing: `OZ0_PYTHON=${env.OZ0_PYTHON} cannot import mcp.server.mcpserver (PyPI mcp 2.x)` };
  }
  const venv = pythonVenv(opts.root);
  const python = path.join(venv, 'bin', 'python');
  const wanted = fs.readFileSync(requirementsFile(opts.root), 'utf8');
  const stamp = path.join(venv, 'oz0-requirements.txt');
  const held = fs.existsSync(stamp) ? fs.readFileSync(stamp, 'utf8') : undefined;
  if (held === wanted && runs(python, ['-c', 'import mcp.server.mcpserver'])) return { python };
  if (opts.install === false)
    return { missing: `no venv with the MCP Python SDK at ${venv}: run npm run python:install` };
  const base = ['python3', 'python'].find((p) => runs(p, ['-c', 'import venv, ensurepip']));
  if (!base) return { missing: 'no python3 with venv and ensurepip on PATH (Debian: apt-get install python3-venv)' };
  log(`installing the MCP Python SDK (${wanted.trim().split('\n').join(', ')}) into ${venv}`);
  try {
    if (!fs.existsSync(python)) execFileSync(base, ['-m', 'venv', venv], { stdio: ['ignore', 'ignore', 'pipe'] });
    execFileSync(
      python,
      ['-m', 'pip', 'install', '--quiet', '--disable-pip-version-check', '-r', requirementsFile(opts.root)],
      { stdio: ['ignore', 'ignore', 'pipe'], env: { ...env, PIP_ROOT_USER_ACTION: 'ignore' }, timeout: 600_000 },
    );
  } catch (err) {
    const stderr = (err as { stderr?: Buffer }).stderr?.toString().trim().split('\n').at(-1);
    return { missing: `pip could not install the MCP Python SDK: ${stderr || (err as Error).message.split('\n')[0]}` };
  }
  fs.writeFileSync(stamp, wanted);
  return { python };
}

if (require.main === module) {
  const found = findPython({ log: (line) => console.error(line) });
  if ('python' in found) console.log(found.python);
  else {
    console.error(found.missing);
    process.exit(1);
  }
}
