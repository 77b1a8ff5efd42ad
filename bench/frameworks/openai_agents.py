"""The OpenAI Agents SDK for Python (openai-agents) as an oz0 harness: its MCP server class, driven without a model."""
import asyncio, json, os
from agents.mcp import MCPServerStreamableHttp

async def main():
    params = {"url": os.environ["OZ0_MCP_URL"], "headers": {"Authorization": f"Bearer {os.environ['OZ0_MCP_TOKEN']}"}}
    async with MCPServerStreamableHttp(params=params) as server:
        tools = await server.list_tools()
        result = await server.call_tool("reader.echo", {"text": "from openai-agents"})
    print(json.dumps({"framework": "openai-agents", "tools": [t.name for t in tools], "result": result.model_dump(mode="json", exclude_none=True)}))

asyncio.run(main())
