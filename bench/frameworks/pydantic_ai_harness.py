"""Pydantic AI (pydantic-ai) as an oz0 harness: an Agent on its MCP toolset, run with a FunctionModel that reads the
tools' names as a hosted model would get them and calls the echo tool by its name."""
import asyncio, json, os
from pydantic_ai import Agent
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import FunctionModel

handed: list[str] = []

def scripted(messages, info):  # noqa: ANN001
    if handed:
        return ModelResponse(parts=[TextPart("done")])
    handed.extend(tool.name for tool in info.function_tools)
    echo = next(name for name in handed if name.endswith("echo"))
    return ModelResponse(parts=[ToolCallPart(echo, {"text": "from pydantic-ai"})])

async def main():
    server = MCPToolset(os.environ["OZ0_MCP_URL"], headers={"Authorization": f"Bearer {os.environ['OZ0_MCP_TOKEN']}"})
    async with server:
        out = await Agent(FunctionModel(scripted), toolsets=[server]).run("echo")
    returned = [p.content for m in out.all_messages() for p in m.parts if isinstance(p, ToolReturnPart)]
    print(json.dumps({"framework": "pydantic-ai", "model": handed, "result": returned[0] if returned else None}, default=str))

asyncio.run(main())
