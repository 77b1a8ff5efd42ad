"""LangChain's MCP adapters for Python (langchain-mcp-adapters) as an oz0 harness: its tools as a chat model's
bind_tools hands them to a hosted model (convert_to_openai_tool, what ChatOpenAI sends), and the echo tool called by
that name."""
import asyncio, json, os
from langchain_core.utils.function_calling import convert_to_openai_tool
from langchain_mcp_adapters.client import MultiServerMCPClient

async def main():
    auth = {"Authorization": f"Bearer {os.environ['OZ0_MCP_TOKEN']}"}
    client = MultiServerMCPClient({"oz0": {"transport": "streamable_http", "url": os.environ["OZ0_MCP_URL"], "headers": auth}})
    tools = {convert_to_openai_tool(t)["function"]["name"]: t for t in await client.get_tools()}
    echo = next(name for name in tools if name.endswith("echo"))
    result = await tools[echo].ainvoke({"text": "from langchain-mcp-adapters"})
    print(json.dumps({"framework": "langchain-mcp-adapters", "model": list(tools), "result": str(result)}))

asyncio.run(main())
