"""A reports server in Python that runs its long exports as MCP tasks (the `io.modelcontextprotocol/tasks` extension of
2026-07-28, oz0_tasks.py) and has a function that asks the caller to confirm (a multi-round-trip request).

`export_orders` writes a report row by row (REPORT_ROW_MS each). To a client that declares the extension, on
2026-07-28, it answers at once with a task and writes the rows after that answer; to any other client it writes them
before it answers, as an ordinary call. It says `idempotent_hint=False`: a write oz0 makes once, so oz0 polls the
task (even on another node) and never calls again.

`import_orders` runs as a task only, and asks in the middle: after its first batch it asks the caller to confirm
overwriting what is there (`input_required` on the task, answered with `tasks/update`), and goes on once confirmed.

Two more functions ask a person to confirm. `purge_orders` asks with the SDK's resolver (`Resolve`, `Elicit`), which
answers `input_required` on 2026-07-28 and sends `elicitation/create` on older connections, and refuses the call with
-32021 to a client that did not declare elicitation (oz0 declares none), on either. `archive_orders` answers
`input_required` by hand, on 2026-07-28, whatever the client declared.

    .tools/python/bin/python examples/python/reports.py              # stdio
    .tools/python/bin/python examples/python/reports.py --http 8942  # Streamable HTTP
"""

from __future__ import annotations

import asyncio
import os
from typing import Annotated, Any

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from mcp_types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import BaseModel

from oz0_kit import idempotency_key, record, serve, text_result
from oz0_tasks import MODERN, Task, TaskStore, TasksExtension

ROW_MS = float(os.environ.get("REPORT_ROW_MS", "300"))
WRITE = ToolAnnotations(read_only_hint=False, idempotent_hint=False, destructive_hint=False)


async def export_work(arguments: dict[str, Any], task: Task | None = None) -> CallToolResult:
    """The export itself: a row at a time, each written down as it is done."""
    rows, name = int(arguments.get("rows", 5)), str(arguments.get("name", "orders"))
    for row in range(1, rows + 1):
        await asyncio.sleep(ROW_MS / 1000)
        record({"tool": "export_orders", "event": "row", "name": name, "row": row})
    record({"tool": "export_orders", "event": "done", "name": name})
    return text_result(f"exported {rows} rows of {name}", {"name": name, "rows": rows})


async def import_work(arguments: dict[str, Any], task: Task) -> CallToolResult:
    """The import: a first batch, then a person's confirmation before it overwrites what is there."""
    batches, name = int(arguments.get("batches", 3)), str(arguments.get("name", "orders"))
    for batch in range(1, batches + 1):
        if batch == 2:
            schema = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
            ask = {"mode": "form", "message": f"Overwrite the orders already in {name}?", "requestedSchema": schema}
            record({"tool": "import_orders", "event": "asked", "name": name, "taskId": task.task_id})
            answer = await task.ask({"overwrite": {"method": "elicitation/create", "params": ask}})
            content = (answer.get("overwrite") or {}).get("content") or {}
            if not content.get("confirm"):
                return text_result(f"import of {name} stopped before overwriting", is_error=True)
        await asyncio.sleep(ROW_MS / 1000)
        record({"tool": "import_orders", "event": "batch", "name": name, "batch": batch})
    return text_result(f"imported {batches} batches into {name}", {"name": name, "batches": batches})


tasks = TasksExtension(
    TaskStore(), task_tools={"export_orders": export_work, "import_orders": import_work}, on_event=record
)
mcp = MCPServer("oz0-python-reports", extensions=[tasks])


@mcp.tool(annotations=WRITE)
async def export_orders(ctx: Context, rows: int = 5, name: str = "orders") -> CallToolResult:
    """Export `rows` rows of orders to a report. Long: a client that takes tasks gets one."""
    record({"tool": "export_orders", "event": "call", "key": idempotency_key(ctx), "protocol": ctx.protocol_version})
    return await export_work({"rows": rows, "name": name})


@mcp.tool(annotations=WRITE)
async def import_orders(ctx: Context, batches: int = 3, name: str = "orders") -> CallToolResult:
    """Import `batches` batches of orders, asking before it overwrites: run as a task, to a client that takes tasks."""
    record({"tool": "import_orders", "event": "call", "key": idempotency_key(ctx), "protocol": ctx.protocol_version})
    return text_result("import_orders runs as a task: call it from a client that takes them", is_error=True)


class Confirm(BaseModel):
    confirm: bool


def confirmation(before: str) -> Elicit[Confirm]:
    return Elicit(f"Delete every order before {before}?", Confirm)


@mcp.tool(annotations=ToolAnnotations(destructive_hint=True))
async def purge_orders(ctx: Context, before: str, answer: Annotated[Confirm, Resolve(confirmation)]) -> str:
    """Delete the orders before a date, once a person confirms it."""
    record({"tool": "purge_orders", "event": "purge", "key": idempotency_key(ctx), "confirmed": answer.confirm})
    return f"purged orders before {before}" if answer.confirm else "not purged"


@mcp.tool(annotations=ToolAnnotations(destructive_hint=True))
async def archive_orders(ctx: Context, before: str) -> Any:
    """Archive the orders before a date, once a person confirms it (2026-07-28 only)."""
    record({"tool": "archive_orders", "event": "call", "key": idempotency_key(ctx), "protocol": ctx.protocol_version})
    if ctx.protocol_version != MODERN:
        return text_result("archive_orders asks over 2026-07-28 only", is_error=True)
    if not (ctx.input_responses or {}).get("confirm"):
        schema = {"type": "object", "properties": {"confirm": {"type": "boolean"}}, "required": ["confirm"]}
        ask = {"mode": "form", "message": f"Archive every order before {before}?", "requestedSchema": schema}
        return InputRequiredResult(input_requests={"confirm": {"method": "elicitation/create", "params": ask}})
    return text_result(f"archived orders before {before}")


if __name__ == "__main__":
    serve(mcp)
