"""The OpenAI Agents SDK for Python (openai-agents) as an oz0 harness: an Agent on its MCP server class, run with a
scripted model that reads the tools' names as a hosted model would get them and calls the echo tool by its name."""
import asyncio, json, os
from agents import Agent, Runner
from agents.items import ModelResponse, ToolCallOutputItem
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

handed: list[str] = []

class Scripted(Model):
    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **_):  # noqa: A002, ANN001
        if handed:
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            done = ResponseOutputMessage(type="message", id="m1", role="assistant", status="completed", content=[text])
            return ModelResponse(output=[done], usage=Usage(), response_id=None)
        handed.extend(tool.name for tool in tools)
        echo = next(name for name in handed if name.endswith("echo"))
        call = ResponseFunctionToolCall(type="function_call", id="f1", call_id="c1", name=echo, arguments=json.dumps({"text": "from openai-agents"}))
        return ModelResponse(output=[call], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the scripted model does not stream")

async def main():
    params = {"url": os.environ["OZ0_MCP_URL"], "headers": {"Authorization": f"Bearer {os.environ['OZ0_MCP_TOKEN']}"}}
    async with MCPServerStreamableHttp(params=params) as server:
        out = await Runner.run(Agent(name="probe", mcp_servers=[server], model=Scripted()), "echo", max_turns=3)
    result = next((str(i.output) for i in out.new_items if isinstance(i, ToolCallOutputItem)), None)
    print(json.dumps({"framework": "openai-agents", "model": handed, "result": result}))

asyncio.run(main())
