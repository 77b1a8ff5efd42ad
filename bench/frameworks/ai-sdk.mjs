// The AI SDK (ai, @ai-sdk/mcp) as an oz0 harness: its MCP client's tools handed to generateText with a scripted model
// (the SDK's own MockLanguageModelV4), which reads the tools' names as a hosted model would get them and calls the
// echo tool by the name it was given.
import { createMCPClient } from '@ai-sdk/mcp';
import { generateText, stepCountIs } from 'ai';
import { MockLanguageModelV4 } from 'ai/test';

const client = await createMCPClient({
  transport: {
    type: 'http',
    url: process.env.OZ0_MCP_URL,
    headers: { Authorization: `Bearer ${process.env.OZ0_MCP_TOKEN}` },
  },
});
const usage = {
  inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 },
  outputTokens: { total: 0, text: 0, reasoning: 0 },
};
let handed;
const model = new MockLanguageModelV4({
  doGenerate: async (options) => {
    if (handed)
      return { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop' }, usage, warnings: [] };
    handed = (options.tools ?? []).map((t) => t.name);
    const echo = handed.find((n) => n.endsWith('echo'));
    const call = {
      type: 'tool-call',
      toolCallId: 't1',
      toolName: echo,
      input: JSON.stringify({ text: 'from the AI SDK' }),
    };
    return { content: [call], finishReason: { unified: 'tool-calls' }, usage, warnings: [] };
  },
});
const out = await generateText({ model, tools: await client.tools(), prompt: 'echo', stopWhen: stepCountIs(3) });
await client.close();
const result = out.steps[0]?.toolResults[0]?.output ?? out.steps[0]?.content.find((c) => c.type === 'tool-error');
console.log(JSON.stringify({ framework: 'ai', model: handed, result }));
