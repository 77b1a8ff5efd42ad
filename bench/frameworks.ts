/**
 * `node dist/bench/frameworks.js`: agent frameworks' MCP clients as harnesses on a real node (H1-H8), which MCP
 * revision each ends up speaking with the node's gateway (issue 25.2), from the gateway's own log, and the name each
 * hands its model for a tool (issue 32.3). Each harness (bench/frameworks/) runs its framework's agent loop (or its
 * conversion for a model's tools) with a scripted model in place of a hosted one: the model reads the tools' names as
 * a hosted model would get them and calls the echo tool by the name it was given.
 *
 * The frameworks are not oz0's dependencies: install them where you like and say where.
 *   FRAMEWORKS_JS=DIR       a folder whose node_modules has @openai/agents, @ai-sdk/mcp, @langchain/mcp-adapters
 *                           and @mastra/mcp
 *   FRAMEWORKS_PYTHON=FILE  a Python with openai-agents and pydantic-ai-slim[mcp]
 *   FRAMEWORKS_PYTHON_LANGCHAIN=FILE  a Python with langchain-mcp-adapters (it needs the Python SDK 1.x: a venv of
 *                           its own)
 * A framework that is not installed is reported as such.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import pino from 'pino';
import { parseConfig } from '../common/config';
import { processDataOf } from '../data';
import { createLogger } from '../common/logger';
import { projectRoot } from '../common/paths';
import { table } from '../common/text';
import { startDevServer } from '../worker/dev-server';
import { createNode } from '../worker/node';
import { findTemporalCli } from '../worker/temporal-cli';
import { isSessionTrace } from '../model/job';
import { MODEL_NAME_PATTERN } from '../model/model-names';
import type { JobTrace } from '../model/job';

const HERE = path.join(projectRoot(), 'bench', 'frameworks');

interface Framework {
  name: string;
  command?: string;
  script: string;
  /** What its sandbox must read besides its command and script (I2): a JavaScript harness's node_modules. */
  read?: string[];
  missing?: string;
}

function frameworks(): Framework[] {
  const js = process.env.FRAMEWORKS_JS;
  const python = process.env.FRAMEWORKS_PYTHON;
  // An ES module finds its imports beside itself: the JavaScript harnesses run from a copy in FRAMEWORKS_JS.
  const jsHarness = (file: string): Framework => {
    if (!js) return { name: file, script: file, missing: 'FRAMEWORKS_JS is not set' };
    fs.copyFileSync(path.join(HERE, file), path.join(js, `oz0-${file}`));
    return { name: file, command: 'node', script: path.join(js, `oz0-${file}`), read: [js] };
  };
  const pyHarness = (file: string, interpreter = python, variable = 'FRAMEWORKS_PYTHON'): Framework =>
    interpreter
      ? { name: file, command: interpreter, script: path.join(HERE, file) }
      : { name: file, script: file, missing: `${variable} is not set` };
  return [
    { ...jsHarness('openai-agents.mjs'), name: '@openai/agents (JS)' },
    { ...jsHarness('ai-sdk.mjs'), name: '@ai-sdk/mcp (the AI SDK)' },
    { ...jsHarness('langchain.mjs'), name: '@langchain/mcp-adapters (JS)' },
    { ...jsHarness('mastra.mjs'), name: '@mastra/mcp' },
    { ...pyHarness('openai_agents.py'), name: 'openai-agents (Python)' },
    // Not pydantic_ai.py: Python runs a script with its folder first on the path, and that name would import itself.
    { ...pyHarness('pydantic_ai_harness.py'), name: 'pydantic-ai (Python)' },
    {
      ...pyHarness('langchain_harness.py', process.env.FRAMEWORKS_PYTHON_LANGCHAIN, 'FRAMEWORKS_PYTHON_LANGCHAIN'),
      name: 'langchain-mcp-adapters (Python)',
    },
  ];
}

async function main(): Promise<void> {
  const cli = findTemporalCli();
  const dev = await startDevServer({ cli, uiPort: false });
  const dir = fs.mkdtempSync(path.join(projectRoot(), '.oz0', 'frameworks-'));
  const logFile = path.join(dir, 'node.log');
  const all = frameworks();
  const runnable = all.filter((f) => !f.missing);
  const harnesses = Object.fromEntries(
    runnable.map((f, i) => [
      `f${i}`,
      {
        command: f.command!,
        args: [f.script],
        tools: ['reader.*'],
        timeoutSeconds: 120,
        ...(f.read ? { sandbox: { read: f.read } } : {}),
      },
    ]),
  );
  const config = {
    ...parseConfig({
      temporal: { address: dev.address, taskQueue: 'frameworks' },
      servers: { reader: { command: 'node', args: [path.join(projectRoot(), 'dist', 'examples', 'reader.js')] } },
      harnesses,
    }),
    baseDir: dir,
    source: 'bench/frameworks.ts',
  };
  const node = await createNode({
    config,
    logger: createLogger({ level: 'info', destination: pino.destination(logFile) }),
  });
  const connection = await Connection.connect({ address: dev.address });
  try {
    const trace: JobTrace = await node.runUntil(async () => {
      const data = processDataOf(config);
      const client = new Client({ connection, dataConverter: data.dataConverter });
      data.useClient(client);
      const handle = await client.workflow.start('job', {
        taskQueue: 'frameworks',
        workflowId: `frameworks-${Date.now()}`,
        args: [{ tenant: 'bench', steps: Object.keys(harnesses).map((h) => ({ session: { harness: h, input: {} } })) }],
      });
      return handle.result();
    });
    const spoken = new Map<string, { protocol: string; client?: string }>();
    for (const line of fs.readFileSync(logFile, 'utf8').split('\n')) {
      if (!line.includes('the harness speaks MCP')) continue;
      const entry = JSON.parse(line) as { harness: string; protocol: string; client?: string };
      spoken.set(entry.harness, entry);
    }
    const sessions = trace.steps.filter(isSessionTrace);
    const rows = all.map((f) => {
      if (f.missing) return [f.name, '-', '-', '-', '-', `not run: ${f.missing}`];
      const key = `f${runnable.indexOf(f)}`;
      const session = sessions.find((s) => s.harness === key);
      const said = spoken.get(key);
      // Its call by the name its model got, as the job made it: `reader.echo`, answered.
      const called = session?.calls.some((c) => c.tool === 'reader.echo' && c.attempts.at(-1)?.outcome === 'ok');
      const ok = session?.result && !session.result.isError && called ? 'listed and called' : 'failed';
      // What the harness printed: the names its framework handed the (scripted) model.
      const handed = (session?.result?.structuredContent?.model ?? []) as string[];
      const refused = handed.filter((name) => !MODEL_NAME_PATTERN.test(name));
      const takes = handed.length === 0 ? '-' : refused.length ? `no: ${refused.length} of ${handed.length}` : 'yes';
      const echo = handed.find((name) => name.endsWith('echo')) ?? '-';
      return [f.name, said?.protocol ?? '-', said?.client ?? '-', echo, takes, ok];
    });
    const heads = ['framework', 'MCP revision', 'client says it is', 'its model gets', 'API pattern', 'harness'];
    console.log(table(heads, rows).join('\n'));
    console.log(
      `\nits model gets: the name the framework hands its model for reader.echo; API pattern: whether every name`,
    );
    console.log(
      `it hands its model matches ${MODEL_NAME_PATTERN.source} (OpenAI's and Anthropic's APIs refuse any other)`,
    );
  } finally {
    await connection.close();
    await dev.stop();
  }
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
