/**
 * A program in a venv, sandboxed (issue 32.4, SPEC I2): the usual Python layout — a project folder granted `read`, its
 * `.venv` made by `python -m venv` inside it, the command the venv's `bin/python` (a symlink to the interpreter it was
 * made from, outside the folder) — runs as a sandboxed server and as a harness, on a real node and a real Temporal dev
 * server. Each says from its side which interpreter and prefix it runs on and what it read of the project.
 *
 * The MCP Python SDK comes from the project's own venv (.tools/python, made by test/global-setup.ts): the test venv
 * names that venv's site-packages in a `.pth` file, and the sandboxes are granted it read-only. (`--system-site-packages`
 * would not do: a venv made from a venv's python takes the base interpreter's packages, not that venv's.) The grant is
 * given through the path `.tools/python` is reached by, a symlink in a worktree: links at any level.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { JobSpec } from '../../model/schemas';
import { callsOf, isSessionTrace } from '../../model/job';
import { runJob, tmpDir, useTemporal } from '../helpers/temporal';
import { python, pythonMissing } from '../helpers/python';

const temporal = useTemporal();

const SERVER_PY = `"""The project's own MCP server."""
import os
import sys

from mcp.server.mcpserver import MCPServer

mcp = MCPServer("venv-project")


@mcp.tool()
def where() -> dict[str, str]:
    """Which interpreter and prefix this runs on, and the project's notes."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.txt")) as f:
        return {"executable": sys.executable, "prefix": sys.prefix, "notes": f.read()}


if __name__ == "__main__":
    mcp.run()
`;

const AGENT_PY = `"""The project's own agent: asks its gateway for box.where, prints what it said and where the agent itself runs."""
import json
import os
import sys

import anyio
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client


async def main() -> None:
    headers = {"Authorization": f"Bearer {os.environ['OZ0_MCP_TOKEN']}"}
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120))
    async with http, Client(streamable_http_client(os.environ["OZ0_MCP_URL"], http_client=http)) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        result = await client.call_tool("box.where", {})
    print(json.dumps({"executable": sys.executable, "prefix": sys.prefix, "tools": tools,
                      "server": result.structured_content}), flush=True)


anyio.run(main)
`;

/** `python -c CODE` with an interpreter, its output trimmed. */
function ask(interpreter: string, code: string): string {
  return execFileSync(interpreter, ['-c', code], { encoding: 'utf8' }).trim();
}

/** A project folder as a user has it: its code, a file it reads, and `.venv` made by `python -m venv` inside it. */
function project() {
  const dir = tmpDir('oz0-venv-project-');
  // The sandbox's user (65534 when the node is root) must get into it, as into any folder a user grants.
  fs.chmodSync(dir, 0o755);
  fs.writeFileSync(path.join(dir, 'server.py'), SERVER_PY);
  fs.writeFileSync(path.join(dir, 'agent.py'), AGENT_PY);
  fs.writeFileSync(path.join(dir, 'notes.txt'), 'notes of the project');
  execFileSync(python!, ['-m', 'venv', path.join(dir, '.venv')], { stdio: 'ignore', timeout: 120_000 });
  const venvPython = path.join(dir, '.venv', 'bin', 'python');
  const sdk = ask(python!, 'import sysconfig; print(sysconfig.get_paths()["purelib"])');
  const own = ask(venvPython, 'import sysconfig; print(sysconfig.get_paths()["purelib"])');
  fs.writeFileSync(path.join(own, 'oz0-sdk.pth'), `${sdk}\n`);
  return { dir, venvPython, sdk };
}

const withPython = python ? test : test.skip;
if (!python) test.skip(`a venv in a sandbox: skipped, ${pythonMissing}`, () => undefined);

withPython(
  'I2 (issue 32.4): a sandboxed server and a harness whose command is the venv’s bin/python, a symlink inside their granted project folder, start and work',
  async () => {
    const { dir, venvPython, sdk } = project();
    // The layout the issue met: bin/python is a link whose target lies outside the granted folder.
    expect(fs.lstatSync(venvPython).isSymbolicLink()).toBe(true);
    expect(fs.realpathSync(venvPython).startsWith(`${dir}/`)).toBe(false);
    const grants = { read: [dir, sdk] };
    const config = temporal.config({
      servers: { box: { command: venvPython, args: [path.join(dir, 'server.py')], sandbox: grants } },
      harnesses: {
        agent: { command: venvPython, args: [path.join(dir, 'agent.py')], tools: ['box.*'], sandbox: grants },
      },
    });
    const spec: JobSpec = {
      tenant: 'acme',
      steps: [{ call: 'box.where' }, { session: { harness: 'agent', input: {} } }],
    };
    const { trace } = await runJob(temporal, config, spec);
    const venv = path.join(dir, '.venv');
    const [call] = callsOf(trace);
    expect([call.tool, call.result.isError, call.attempts.map((a) => a.outcome)]).toEqual(['box.where', false, ['ok']]);
    // The server's own word: it runs on the venv (its prefix, its bin/python), and read the project's file.
    expect(call.result.structuredContent).toEqual({
      executable: venvPython,
      prefix: venv,
      notes: 'notes of the project',
    });
    const session = trace.steps.filter(isSessionTrace)[0];
    expect(session.runs[0].ended).toBe('exited 0');
    expect(session.result?.structuredContent).toEqual({
      executable: venvPython,
      prefix: venv,
      tools: expect.arrayContaining([expect.stringMatching(/where$/)]),
      server: { executable: venvPython, prefix: venv, notes: 'notes of the project' },
    });
  },
  180_000,
);
