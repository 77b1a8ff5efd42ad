/**
 * The cost of one call, in one run, interleaved: an oz0 job of N echo calls, a bare Temporal workflow whose
 * activity makes the same MCP call, and the MCP SDK call alone — same stdio server (the example reader).
 * Prints ms per call and the ratio oz0 / bare (target ≤ 1.15).
 *
 *   npm run bench:calls -- [--calls 200] [--rounds 3]
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Client as McpClient } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { Client, Connection } from '@temporalio/client';
import { NativeConnection, Worker, bundleWorkflowCode } from '@temporalio/worker';
import { parseConfig } from '../worker/config';
import { startDevServer } from '../worker/dev-server';
import { createLogger } from '../worker/logger';
import { createNode } from '../worker/node';
import { projectRoot } from '../worker/paths';
import { findTemporalCli } from '../worker/temporal-cli';
import { bareActivities } from './bare/activities';

function arg(name: string, fallback: number): number {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : fallback;
}

async function main(): Promise<void> {
  const calls = arg('calls', 200);
  const rounds = arg('rounds', 3);
  const root = projectRoot();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oz0-cost-'));
  const reader = path.join(root, 'dist', 'examples', 'reader.js');
  const env = { READER_STATE: path.join(dir, 'seen.json') };
  const logger = createLogger({ level: 'warn' });
  const server = await startDevServer({ cli: findTemporalCli(), uiPort: false });
  const config = {
    ...parseConfig({
      temporal: { address: server.address, taskQueue: 'oz0-cost' },
      servers: { reader: { command: 'node', args: [reader], env } },
      jobs: { continueAsNewAfterCalls: 10_000 },
    }),
    baseDir: root,
    source: 'bench',
  };
  const connection = await Connection.connect({ address: server.address });
  const client = new Client({ connection });
  const node = await createNode({ config, logger });
  const nodeRun = node.run();
  const mcp = new McpClient({ name: 'bench', version: '1' });
  await mcp.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [reader],
      env: { ...env, PATH: process.env.PATH ?? '' },
    }),
  );
  const native = await NativeConnection.connect({ address: server.address });
  const bare = await Worker.create({
    connection: native,
    taskQueue: 'bare-cost',
    workflowBundle: await bundleWorkflowCode({ workflowsPath: require.resolve('./bare/workflows') }),
    activities: bareActivities(mcp),
  });
  const bareRun = bare.run();
  const results: Record<string, number[]> = { oz0: [], bare: [], sdk: [] };
  try {
    let n = 0;
    const steps = Array.from({ length: calls }, (_, i) => ({ call: 'reader.echo', args: { text: `t${i}` } }));
    // Warm both paths once so bundles, processes and caches are in place.
    await (
      await client.workflow.start('job', {
        taskQueue: 'oz0-cost',
        workflowId: `warm-${++n}`,
        args: [{ tenant: 'bench', steps: steps.slice(0, 10) }],
      })
    ).result();
    await client.workflow.execute('bareJob', { taskQueue: 'bare-cost', workflowId: `warm-${++n}`, args: [10] });
    for (let r = 0; r < rounds; r++) {
      let t = Date.now();
      await (
        await client.workflow.start('job', {
          taskQueue: 'oz0-cost',
          workflowId: `oz0-${++n}`,
          args: [{ tenant: 'bench', steps }],
        })
      ).result();
      results.oz0.push((Date.now() - t) / calls);
      t = Date.now();
      await client.workflow.execute('bareJob', { taskQueue: 'bare-cost', workflowId: `bare-${++n}`, args: [calls] });
      results.bare.push((Date.now() - t) / calls);
      t = Date.now();
      for (let i = 0; i < calls; i++) await mcp.callTool({ name: 'echo', arguments: { text: `t${i}` } });
      results.sdk.push((Date.now() - t) / calls);
    }
  } finally {
    bare.shutdown();
    await bareRun;
    await node.shutdown();
    await nodeRun;
    await mcp.close();
    await native.close();
    await connection.close();
    await server.stop();
  }
  const median = (v: number[]) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];
  const oz0 = median(results.oz0);
  const bareMs = median(results.bare);
  const sdk = median(results.sdk);
  const machine = { cpus: os.cpus().length, cpu: os.cpus()[0]?.model, node: process.version };
  process.stdout.write(
    `machine: ${JSON.stringify(machine)}; ${calls} sequential calls x ${rounds} interleaved rounds (median)\n`,
  );
  process.stdout.write(
    `oz0 ${oz0.toFixed(2)} ms/call, bare activity ${bareMs.toFixed(2)} ms/call, MCP SDK alone ${sdk.toFixed(2)} ms/call\n`,
  );
  process.stdout.write(`oz0 / bare = ${(oz0 / bareMs).toFixed(2)} (target ≤ 1.15)\n`);
  const resultsDir = path.join(root, 'bench', 'results');
  fs.mkdirSync(resultsDir, { recursive: true });
  const when = new Date().toISOString();
  fs.writeFileSync(
    path.join(resultsDir, `call-cost-${when.replace(/[:.]/g, '-')}.json`),
    `${JSON.stringify({ when, machine, calls, rounds, results }, null, 2)}\n`,
  );
}

main().catch((err) => {
  createLogger().error(err);
  process.exit(1);
});
