// LangChain.js's MCP adapters (@langchain/mcp-adapters) as an oz0 harness, driven without a model.
import { MultiServerMCPClient } from '@langchain/mcp-adapters';
const client = new MultiServerMCPClient({
  mcpServers: {
    oz0: {
      transport: 'http',
      url: process.env.OZ0_MCP_URL,
      headers: { Authorization: `Bearer ${process.env.OZ0_MCP_TOKEN}` },
      automaticSSEFallback: false,
    },
  },
  useStandardContentBlocks: true,
});
const tools = await client.getTools();
const echo = tools.find((t) => t.name === 'reader.echo');
const result = await echo.invoke({ text: 'from @langchain/mcp-adapters' });
await client.close();
console.log(JSON.stringify({ framework: '@langchain/mcp-adapters', tools: tools.map((t) => t.name), result }));
