// LangChain.js's MCP adapters (@langchain/mcp-adapters) as an oz0 harness: its tools as a chat model's bind_tools
// hands them to a hosted model (convertToOpenAITool, what ChatOpenAI sends), and the echo tool called by that name.
import { MultiServerMCPClient } from '@langchain/mcp-adapters';
import { convertToOpenAITool } from '@langchain/core/utils/function_calling';
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
const handed = tools.map((t) => convertToOpenAITool(t).function.name);
const chosen = handed.find((n) => n.endsWith('echo'));
const echo = tools.find((t) => convertToOpenAITool(t).function.name === chosen);
const result = await echo.invoke({ text: 'from @langchain/mcp-adapters' });
await client.close();
console.log(JSON.stringify({ framework: '@langchain/mcp-adapters', model: handed, result }));
