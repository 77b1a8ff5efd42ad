/**
 * A harness for the chaos run (SPEC H8): it makes the calls its input lists, in order, over plain MCP to its node's
 * gateway, and prints how many it made. The same input gives the same calls in the same order, so a run started
 * again after its node was lost gets the same keys and the ledger makes each write once.
 */
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { z } from 'zod';

const InputSchema = z.object({
  calls: z.array(z.object({ tool: z.string(), args: z.record(z.string(), z.unknown()) })),
});

async function main(): Promise<void> {
  const input = InputSchema.parse(JSON.parse(process.env.OZ0_INPUT ?? 'null'));
  const transport = new StreamableHTTPClientTransport(new URL(process.env.OZ0_MCP_URL ?? ''), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.OZ0_MCP_TOKEN}` } },
  });
  const client = new Client({ name: 'chaos-writer', version: '1.0.0' });
  await client.connect(transport);
  let failed = 0;
  for (const call of input.calls) {
    const result = await client.callTool({ name: call.tool, arguments: call.args }, { timeout: 300_000 });
    if (result.isError) failed++;
  }
  await client.close();
  console.log(JSON.stringify({ calls: input.calls.length, failed }));
}

main().catch((err: unknown) => {
  process.stderr.write(`writer harness: ${(err as Error).message}\n`);
  process.exit(1);
});
