"""An agent harness in Python on the MCP Python SDK's client (SPEC H1-H8), the twin of refunds.ts: it decides each
call from the answers to the last ones. It has no oz0 code: it speaks MCP (Streamable HTTP) to OZ0_MCP_URL with the
bearer OZ0_MCP_TOKEN, reads its input from OZ0_INPUT and prints its result as its last line on stdout. oz0 makes every
call durable: keys, retries, policy, cancels, progress, a fresh start on another node if this one is lost.

What it does with {"order_id": "o-1", "amount": 500}: looks the order up; charges it when nothing was charged, refunds
what was charged and not yet refunded otherwise; then, at once, sets the order's status, writes a line to the audit
log, and runs a slow check it cancels itself when its own deadline passes (cancelling the task that awaits call_tool
is how this SDK's client gives up on a call: the server gets notifications/cancelled).

    harnesses.refunds_py: { "command": ".tools/python/bin/python", "args": ["examples/agents/refunds.py"], ... }
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import anyio
import httpx2
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult


def say(line: str) -> None:
    """What the agent says it does, on stderr: oz0 puts it in the node's log."""
    print(f"refunds.py: {line}", file=sys.stderr, flush=True)


def structured(result: CallToolResult, what: str) -> dict[str, Any]:
    if result.is_error:
        raise RuntimeError(f"{what} failed: {result.content}")
    return result.structured_content or {}


async def main() -> None:
    data = json.loads(os.environ.get("OZ0_INPUT") or "null") or {}
    order_id = data.get("order_id")
    if not order_id:
        raise RuntimeError("OZ0_INPUT needs an order_id")
    url = os.environ.get("OZ0_MCP_URL")
    if not url:
        raise RuntimeError("OZ0_MCP_URL is not set: run me as an oz0 harness")
    headers = {"Authorization": f"Bearer {os.environ.get('OZ0_MCP_TOKEN', '')}"}
    # A long read timeout: a call's answer may take as long as its tool's time limit.
    http = httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300))
    async with http, Client(streamable_http_client(url, http_client=http)) as client:
        # Each tool is listed under the name a model API takes, `ledger__refund` for `ledger.refund` (H3); the gateway
        # takes a call by either name, and the trace says `ledger.refund`.
        tools = (await client.list_tools()).tools
        say(f"session {os.environ.get('OZ0_SESSION')} run {os.environ.get('OZ0_SESSION_RUN')}: {len(tools)} tools")

        order = structured(await client.call_tool("ledger__lookup_order", {"order_id": order_id}), "lookup_order")
        if order["charged"] == 0:
            amount = data.get("amount", 100)
            await client.call_tool("ledger__charge", {"order_id": order_id, "amount": amount})
            action = f"charged {amount}"
        elif order["refunded"] < order["charged"]:
            amount = order["charged"] - order["refunded"]
            await client.call_tool("ledger__refund", {"order_id": order_id, "amount": amount})
            action = f"refunded {amount}"
        else:
            action = "nothing to do"
        say(action)

        # Several calls at once; the slow check is cancelled by the agent itself when its deadline passes.
        outcome: dict[str, str] = {}

        async def set_status() -> None:
            status = "refunded" if action.startswith("refunded") else "charged"
            result = await client.call_tool("ledger__set_status", {"id": order_id, "status": status})
            outcome["status"] = "not set" if result.is_error else "set"

        async def audit() -> None:
            await client.call_tool("reader__echo", {"text": f"refunds agent on {order_id}: {action}"})

        async def check() -> None:
            with anyio.move_on_after(data.get("deadline_ms", 500) / 1000) as deadline:
                await client.call_tool("reader__sleep", {"ms": data.get("check_ms", 30_000)})
            outcome["check"] = "cancelled at its deadline" if deadline.cancelled_caught else "done"

        async with anyio.create_task_group() as calls:
            calls.start_soon(set_status)
            calls.start_soon(audit)
            calls.start_soon(check)

    print(json.dumps({"order_id": order_id, "action": action, **outcome}), flush=True)


if __name__ == "__main__":
    try:
        anyio.run(main)
    except Exception as err:  # the session's result says it failed; the details go to the node's log
        say(f"failed: {err!r}")
        sys.exit(1)
