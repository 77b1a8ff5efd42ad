"""Pydantic AI (pydantic-ai) as an oz0 harness: its MCP server class, driven without a model."""
import asyncio, json, os
from pydantic_ai.mcp import MCPToolset

async def main():
    server = MCPToolset(os.environ["OZ0_MCP_URL"], headers={"Authorization": f"Bearer {os.environ['OZ0_MCP_TOKEN']}"})
    async with server:
        tools = await server.list_tools()
        result = await server.direct_call_tool("reader.echo", {"text": "from pydantic-ai"})
    print(json.dumps({"framework": "pydantic-ai", "tools": [t.name for t in tools], "result": result}, default=str))

asyncio.run(main())
