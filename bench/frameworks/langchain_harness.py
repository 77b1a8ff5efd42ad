"""LangChain's MCP adapters for Python (langchain-mcp-adapters) as an oz0 harness, driven without a model."""
import asyncio, json, os
from langchain_mcp_adapters.client import MultiServerMCPClient

async def main():
    auth = {"Authorization": f"Bearer {os.environ['OZ0_MCP_TOKEN']}"}
    client = MultiServerMCPClient({"oz0": {"transport": "streamable_http", "url": os.environ["OZ0_MCP_URL"], "headers": auth}})
    tools = await client.get_tools()
    echo = next(t for t in tools if t.name == "reader.echo")
    result = await echo.ainvoke({"text": "from langchain-mcp-adapters"})
    print(json.dumps({"framework": "langchain-mcp-adapters", "tools": [t.name for t in tools], "result": str(result)}))

asyncio.run(main())
