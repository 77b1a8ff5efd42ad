// The OpenAI Agents SDK for JS (@openai/agents) as an oz0 harness: an Agent on its MCP server class, run with a
// scripted model that reads the tools' names as a hosted model would get them and calls the echo tool by its name.
import { Agent, MCPServerStreamableHttp, Usage, run } from '@openai/agents';

const server = new MCPServerStreamableHttp({
  url: process.env.OZ0_MCP_URL,
  requestInit: { headers: { Authorization: `Bearer ${process.env.OZ0_MCP_TOKEN}` } },
});
let handed;
const model = {
  async getResponse(request) {
    if (handed) {
      const message = {
        type: 'message',
        role: 'assistant',
        status: 'completed',
        content: [{ type: 'output_text', text: 'done' }],
      };
      return { usage: new Usage(), output: [message] };
    }
    handed = request.tools.map((t) => t.name);
    const echo = handed.find((n) => n.endsWith('echo'));
    const call = {
      type: 'function_call',
      callId: 'c1',
      name: echo,
      arguments: JSON.stringify({ text: 'from @openai/agents' }),
      status: 'completed',
    };
    return { usage: new Usage(), output: [call] };
  },
  getStreamedResponse() {
    throw new Error('the scripted model does not stream');
  },
};
await server.connect();
try {
  const agent = new Agent({ name: 'probe', instructions: 'echo', mcpServers: [server], model });
  const out = await run(agent, 'echo', { maxTurns: 3 });
  const result = out.newItems.find((i) => i.type === 'tool_call_output_item')?.output;
  console.log(JSON.stringify({ framework: '@openai/agents', model: handed, result }));
} finally {
  await server.close();
}
