// Mastra's MCP client (@mastra/mcp) as an oz0 harness: its tools by the names a Mastra agent hands its model (the keys
// of getTools(): `<server>_<tool>`), and the echo tool called by that name.
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
const handed = Object.keys(tools);
const result = await tools[handed.find((n) => n.endsWith('echo'))].execute({ context: { text: 'from @mastra/mcp' } });
await client.disconnect();
console.log(JSON.stringify({ framework: '@mastra/mcp', model: handed, result }));
