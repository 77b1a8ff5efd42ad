// Mastra's MCP client (@mastra/mcp) as an oz0 harness, driven without a model.
import { MCPClient } from '@mastra/mcp';
const client = new MCPClient({
  servers: {
    oz0: {
      url: new URL(process.env.OZ0_MCP_URL),
      requestInit: { headers: { Authorization: `Bearer ${process.env.OZ0_MCP_TOKEN}` } },
    },
  },
});
const tools = await client.getTools();
// Mastra names each tool `<server>_<tool>`.
const result = await tools['oz0_reader.echo'].execute({ context: { text: 'from @mastra/mcp' } });
await client.disconnect();
console.log(JSON.stringify({ framework: '@mastra/mcp', tools: Object.keys(tools), result }));
