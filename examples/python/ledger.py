"""A ledger MCP server in Python that honours oz0's idempotency key (K1), on the MCP Python SDK.

Its writes say `idempotent_hint=True` and `_meta["oz0/idempotency_key"]: True`, and keep key -> answer in SQLite
before they answer, so a call oz0 makes again under its key is answered from the record and charges once, across
restarts. `charge` answers busy (B1) for its first LEDGER_BUSY_FIRST receipts of each key, as a provider's 429 would.

    .tools/python/bin/python examples/python/ledger.py              # stdio
    .tools/python/bin/python examples/python/ledger.py --http 8940  # Streamable HTTP
"""

from __future__ import annotations

import asyncio
import json
import os

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations

from oz0_kit import KeyStore, busy, idempotency_key, keyed, record, serve, text_result

mcp = MCPServer("oz0-python-ledger")
store = KeyStore(os.path.abspath(os.environ.get("LEDGER_FILE", os.path.join(".oz0", "python-ledger.db"))))

WRITE = ToolAnnotations(idempotent_hint=True, destructive_hint=False, open_world_hint=True)
HONOURS_KEY = {"oz0/idempotency_key": True}
READ = ToolAnnotations(read_only_hint=True, open_world_hint=False)
CHARGES = {"charge", "slow_charge"}

busy_first = int(os.environ.get("LEDGER_BUSY_FIRST", "0"))
receipts: dict[str, int] = {}


def charged(order_id: str, amount: int) -> CallToolResult:
    charge_id = f"ch-{sum(1 for r in store.records() if r['tool'] in CHARGES) + 1}"
    structured = {"charge_id": charge_id, "order_id": order_id, "amount": amount}
    return text_result(f"charged {amount} to {order_id} ({charge_id})", structured)


@mcp.tool(annotations=WRITE, meta=HONOURS_KEY)
async def charge(order_id: str, amount: int, ctx: Context) -> CallToolResult:
    """Charges amount to order_id, exactly once per _meta["oz0/idempotency_key"]."""
    key = idempotency_key(ctx)
    record({"tool": "charge", "key": key, "args": {"order_id": order_id, "amount": amount}, "requestId": ctx.request_id})
    receipts[key or ""] = receipts.get(key or "", 0) + 1
    if receipts[key or ""] <= busy_first:
        # The provider answered 429: say so, and let oz0 decide whether and when to try again. Never retry here.
        record({"tool": "charge", "event": "busy", "key": key})
        return busy("The billing API is busy (429); try again later (retryable)", 1)

    async def act(interrupted: bool) -> CallToolResult:
        # A real ledger whose charge goes to a provider would ask it by the key first when interrupted.
        return charged(order_id, amount)

    return await keyed(store, "charge", ctx, {"order_id": order_id, "amount": amount}, act)


@mcp.tool(annotations=WRITE, meta=HONOURS_KEY)
async def slow_charge(order_id: str, amount: int, ms: int, ctx: Context) -> CallToolResult:
    """Like charge, but waits ms first; a cancelled call charges nothing."""
    key = idempotency_key(ctx)
    args = {"order_id": order_id, "amount": amount, "ms": ms}
    record({"tool": "slow_charge", "key": key, "args": args, "requestId": ctx.request_id})

    async def act(interrupted: bool) -> CallToolResult:
        try:
            await asyncio.sleep(ms / 1000)
        except asyncio.CancelledError:
            # Nothing was charged: re-raise, so the store keeps nothing and a retry under the key charges.
            record({"tool": "slow_charge", "event": "cancelled", "key": key})
            raise
        return charged(order_id, amount)

    return await keyed(store, "slow_charge", ctx, args, act)


@mcp.tool(annotations=WRITE, meta=HONOURS_KEY)
async def refund(order_id: str, amount: int, ctx: Context) -> CallToolResult:
    """Refunds amount to order_id, exactly once per _meta["oz0/idempotency_key"]."""
    record({"tool": "refund", "key": idempotency_key(ctx), "args": {"order_id": order_id, "amount": amount}})

    async def act(interrupted: bool) -> CallToolResult:
        refund_id = f"rf-{sum(1 for r in store.records() if r['tool'] == 'refund') + 1}"
        structured = {"refund_id": refund_id, "order_id": order_id, "amount": amount}
        return text_result(f"refunded {amount} to {order_id} ({refund_id})", structured)

    return await keyed(store, "refund", ctx, {"order_id": order_id, "amount": amount}, act)


@mcp.tool(annotations=WRITE, meta=HONOURS_KEY)
async def set_status(id: str, status: str, ctx: Context) -> CallToolResult:
    """Sets the status of id, exactly once per _meta["oz0/idempotency_key"]."""
    record({"tool": "set_status", "key": idempotency_key(ctx), "args": {"id": id, "status": status}})

    async def act(interrupted: bool) -> CallToolResult:
        return text_result(f"{id} is {status}", {"id": id, "status": status})

    return await keyed(store, "set_status", ctx, {"id": id, "status": status}, act)


@mcp.tool(annotations=READ)
def lookup_order(order_id: str, ctx: Context) -> CallToolResult:
    """What the ledger holds for order_id: the sum charged, the sum refunded, its last status."""
    record({"tool": "lookup_order", "key": idempotency_key(ctx), "args": {"order_id": order_id}})
    found = {"order_id": order_id, "charged": 0, "refunded": 0, "status": None}
    for r in store.records():
        args = r["args"]
        if r["tool"] in CHARGES and args.get("order_id") == order_id:
            found["charged"] += args.get("amount", 0)
        elif r["tool"] == "refund" and args.get("order_id") == order_id:
            found["refunded"] += args.get("amount", 0)
        elif r["tool"] == "set_status" and args.get("id") == order_id:
            found["status"] = args.get("status")
    return text_result(json.dumps(found), found)


@mcp.tool(annotations=READ)
def count_effects(ctx: Context) -> CallToolResult:
    """Counts the ledger's writes: charges, refunds, statuses, and records per idempotency key."""
    record({"tool": "count_effects", "key": idempotency_key(ctx)})
    counts = {"charges": 0, "refunds": 0, "statuses": 0, "by_key": {}}
    for r in store.records():
        kind = "charges" if r["tool"] in CHARGES else "refunds" if r["tool"] == "refund" else "statuses"
        counts[kind] += 1
        counts["by_key"][r["key"]] = counts["by_key"].get(r["key"], 0) + 1
    return text_result(json.dumps(counts), counts)


if __name__ == "__main__":
    serve(mcp)
