"""An agent harness on the OpenAI Agents SDK for Python (`openai-agents`), run by oz0 as any harness is (SPEC H1-H8).
The agent takes OZ0_MCP_URL as a Streamable HTTP MCP server with the bearer OZ0_MCP_TOKEN; the SDK's Runner lists its
tools, lets the model pick calls and makes them. oz0 makes each call durable, and a tool whose verdict is `confirm`
waits for a person's yes (A4-A7) — which is why this harness raises the SDK's MCP timeout: it gives every MCP request
5 s by default (`client_session_timeout_seconds`), and a call that waits for a person, or runs long, takes longer.

The model: OZ0_AGENT_MODEL names an OpenAI model (the SDK then needs OPENAI_API_KEY); without it a scripted model
stands in and decides what a careful model would, from the answers it got: look the order up, then refund what was
charged and not yet refunded. The SDK's own loop runs either way: tool listing, tool calls, their results.

    harnesses.refunds_openai: { "command": ".tools/python/bin/python", "args": ["examples/agents/refunds_openai.py"],
                                "tools": ["ledger.*"], "timeoutSeconds": 86400 }

OZ0_INPUT: {"order_id": "o-1", "mcp_timeout_seconds": 600}; `mcp_timeout_seconds` (default 86400, a day: as long as
the tool's confirmTimeoutSeconds) is what the SDK's MCP client waits for one call. Its last line on stdout, the
session's result: {"order_id": …, "action": …, "final": the agent's last words}.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from agents import Agent, ModelSettings, Runner
from agents.items import ModelResponse, ToolCallItem, ToolCallOutputItem
from agents.mcp import MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText


def say(line: str) -> None:
    """What the agent says it does, on stderr: oz0 puts it in the node's log."""
    print(f"refunds_openai.py: {line}", file=sys.stderr, flush=True)


def tool_outputs(items: Any) -> list[dict[str, Any]]:
    """The results of the calls so far, in order, as the Runner hands them back to the model."""
    if isinstance(items, str):
        return []
    return [item for item in items if isinstance(item, dict) and item.get("type") == "function_call_output"]


def output_text(output: Any) -> str:
    """A tool's output as text, whichever shape the SDK gives it: text, a text part, or a list of parts."""
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return str(output.get("text", output))
    if isinstance(output, list):
        return " ".join(output_text(part) for part in output)
    return str(getattr(output, "text", output))


class ScriptedModel(Model):
    """Stands in for an LLM: the same decisions, from the same answers, with no network."""

    def __init__(self, order_id: str) -> None:
        self.order_id = order_id

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **_):  # noqa: A002, ANN001
        # The names the SDK hands a model: the gateway's, which every model API takes (`ledger__refund`, H3).
        names = {tool.name for tool in tools}
        done = tool_outputs(input)
        if not done:
            return self.call("ledger__lookup_order", {"order_id": self.order_id}, names)
        if len(done) == 1:
            order = json.loads(output_text(done[0]["output"]))
            owed = order.get("charged", 0) - order.get("refunded", 0)
            if owed > 0:
                return self.call("ledger__refund", {"order_id": self.order_id, "amount": owed}, names)
            return self.say(f"nothing to refund on {self.order_id}")
        return self.say(f"refund of {self.order_id}: {output_text(done[-1]['output'])}")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")

    def call(self, name: str, args: dict[str, Any], names: set[str]) -> ModelResponse:
        if name not in names:
            raise RuntimeError(f"{name} is not among the agent's tools: {sorted(names)}")
        item = ResponseFunctionToolCall(
            type="function_call", id=f"fc_{name}", call_id=f"call_{name}", name=name, arguments=json.dumps(args)
        )
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def say(self, text: str) -> ModelResponse:
        content = ResponseOutputText(type="output_text", text=text, annotations=[])
        message = ResponseOutputMessage(
            type="message", id="msg_1", role="assistant", status="completed", content=[content]
        )
        return ModelResponse(output=[message], usage=Usage(), response_id=None)


async def main() -> None:
    data = json.loads(os.environ.get("OZ0_INPUT") or "null") or {}
    order_id = data.get("order_id")
    url = os.environ.get("OZ0_MCP_URL")
    if not order_id or not url:
        raise RuntimeError("run me as an oz0 harness: OZ0_MCP_URL, and OZ0_INPUT with an order_id")
    timeout = data.get("mcp_timeout_seconds", 86400)
    server = MCPServerStreamableHttp(
        name="oz0",
        params={
            "url": url,
            "headers": {"Authorization": f"Bearer {os.environ.get('OZ0_MCP_TOKEN', '')}"},
            # The HTTP request and the stream it answers on: a call's answer may come hours later.
            "timeout": 30,
            "sse_read_timeout": timeout,
        },
        # The SDK's own limit on each MCP request (5 s unless told): a call that waits for a person needs more.
        client_session_timeout_seconds=timeout,
        cache_tools_list=True,
    )
    model_name = os.environ.get("OZ0_AGENT_MODEL")
    async with server:
        agent = Agent(
            name="refunds",
            instructions="Look the order up; refund what was charged and not yet refunded; say what you did.",
            mcp_servers=[server],
            model=model_name or ScriptedModel(order_id),
            model_settings=ModelSettings(parallel_tool_calls=False),
        )
        say(f"session {os.environ.get('OZ0_SESSION')} run {os.environ.get('OZ0_SESSION_RUN')}: {order_id}")
        result = await Runner.run(agent, f"Refund order {order_id}.", max_turns=6)
    # What the ledger answered to each call, by the call the model made: a refund went through only if it said so.
    names = {item.raw_item.call_id: item.raw_item.name for item in result.new_items if isinstance(item, ToolCallItem)}
    answers = [
        (names.get(item.raw_item["call_id"]), output_text(item.output))
        for item in result.new_items
        if isinstance(item, ToolCallOutputItem)
    ]
    refunded = any(name == "ledger__refund" and out.startswith("refunded") for name, out in answers)
    action = "refunded" if refunded else "not refunded"
    say(f"{action}: {answers}")
    print(json.dumps({"order_id": order_id, "action": action, "final": str(result.final_output)}), flush=True)


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as err:  # the session's result says it failed; the details go to the node's log
        say(f"failed: {err!r}")
        sys.exit(1)
