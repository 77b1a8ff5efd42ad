// The AI SDK's MCP client (@ai-sdk/mcp) as an oz0 harness, driven without a model.
import { createMCPClient } from '@ai-sdk/mcp';
const client = await createMCPClient({
  transport: {
    type: 'http',
    url: process.env.OZ0_MCP_URL,
    headers: { Authorization: `Bearer ${process.env.OZ0_MCP_TOKEN}` },
  },
});
const tools = await client.tools();
const result = await tools['reader.echo'].execute({ text: 'from @ai-sdk/mcp' }, { toolCallId: 't1', messages: [] });
await client.close();
console.log(JSON.stringify({ framework: '@ai-sdk/mcp', tools: Object.keys(tools), result }));
