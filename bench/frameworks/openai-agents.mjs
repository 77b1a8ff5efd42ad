// The OpenAI Agents SDK for JS (@openai/agents) as an oz0 harness: its MCP server class, driven without a model.
import { MCPServerStreamableHttp } from '@openai/agents';
const server = new MCPServerStreamableHttp({
  url: process.env.OZ0_MCP_URL,
  requestInit: { headers: { Authorization: `Bearer ${process.env.OZ0_MCP_TOKEN}` } },
});
await server.connect();
const tools = await server.listTools();
const result = await server.callTool('reader.echo', { text: 'from @openai/agents' });
await server.close();
console.log(JSON.stringify({ framework: '@openai/agents', tools: tools.map((t) => t.name), result }));
