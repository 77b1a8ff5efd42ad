"""MCP tasks as the extension of 2026-07-28 (SEP-2663, `io.modelcontextprotocol/tasks`), on the MCP Python SDK's
extension API (`Extension`, `MethodBinding`, `intercept_tool_call`): the SDK 2.3.0 ships no tasks of its own.

Written from the extension's specification. A server that declares it decides per request whether a `tools/call`
becomes a task: here, a call of a function named in `task_tools`, from a client that declared the extension on that
request, on a 2026-07-28 connection. The call is answered at once with the task (`resultType: "task"`), durably
created before the answer; its work runs after that answer, in this process, and `tasks/get` reports it (the result,
or the JSON-RPC error, inline once it ends). Work that needs a person's answer awaits `task.ask(...)`: the task is
`input_required`, its `inputRequests` in `tasks/get`, until a `tasks/update` brings the `inputResponses`.
`tasks/cancel` asks it to stop (cooperative: an async function is cancelled where it awaits). Any other call runs as
an ordinary one.

    from oz0_tasks import TaskStore, TasksExtension
    tasks = TasksExtension(TaskStore(), task_tools={"export_orders": export_orders_work})
    mcp = MCPServer("reports", extensions=[tasks])

The store keeps tasks in this process's memory: a server that restarts forgets them, and oz0 then says so (a task its
server no longer knows is not made again). Keep them in a database to outlive a restart.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolRequestParams, CallToolResult, RequestParams
from pydantic import Field

TASKS = "io.modelcontextprotocol/tasks"
MODERN = "2026-07-28"

#: The work of a function run as a task: its arguments and its task in, its result out (an exception: a failed task).
Work = Callable[[dict[str, Any], "Task"], Awaitable[CallToolResult]]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class Task:
    task_id: str
    status: str = "working"
    status_message: str | None = None
    created_at: str = field(default_factory=_now)
    last_updated_at: str = field(default_factory=_now)
    ttl_ms: int = 3_600_000
    poll_interval_ms: int = 200
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    input_requests: dict[str, Any] | None = None
    runner: asyncio.Task[None] | None = None
    answered: asyncio.Future[dict[str, Any]] | None = None

    async def ask(self, input_requests: dict[str, Any]) -> dict[str, Any]:
        """Asks the client (an elicitation, a sampling, keyed as the work likes) and waits for its `tasks/update`."""
        self.answered = asyncio.get_running_loop().create_future()
        self.status, self.input_requests = "input_required", input_requests
        self.last_updated_at = _now()
        try:
            return await self.answered
        finally:
            self.answered, self.input_requests = None, None
            if self.status == "input_required":
                self.status, self.last_updated_at = "working", _now()

    def wire(self) -> dict[str, Any]:
        """The task as `tools/call` and `tasks/get` answer it: its status, and what that status carries."""
        out: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "createdAt": self.created_at,
            "lastUpdatedAt": self.last_updated_at,
            "ttlMs": self.ttl_ms,
            "pollIntervalMs": self.poll_interval_ms,
        }
        if self.status_message:
            out["statusMessage"] = self.status_message
        if self.status == "completed" and self.result is not None:
            out["result"] = self.result
        if self.status == "failed" and self.error is not None:
            out["error"] = self.error
        if self.status == "input_required" and self.input_requests is not None:
            out["inputRequests"] = self.input_requests
        return out

    def end(self, status: str, *, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None) -> None:
        if self.status in ("completed", "failed", "cancelled"):
            return  # terminal states do not change
        self.status, self.result, self.error = status, result, error
        self.last_updated_at = _now()


class TaskStore:
    """Tasks by id, in this process. Ids are unguessable: a task id is the only key to its result."""

    def __init__(self) -> None:
        self.tasks: dict[str, Task] = {}

    def create(self) -> Task:
        task = Task(task_id=secrets.token_hex(16))
        self.tasks[task.task_id] = task
        return task

    def get(self, task_id: str) -> Task:
        task = self.tasks.get(task_id)
        if task is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Task not found: {task_id}")
        return task


class TaskIdParams(RequestParams):
    """`tasks/get` and `tasks/cancel` params: the task's id."""

    task_id: str = Field(alias="taskId")


class TaskUpdateParams(TaskIdParams):
    """`tasks/update` params: answers to a task's input requests, keyed as they were asked."""

    input_responses: dict[str, Any] = Field(default_factory=dict, alias="inputResponses")


def seen_as(ctx: ServerRequestContext[Any, Any]) -> dict[str, Any]:
    """How a request came: its revision, and its session (none on 2026-07-28), for the log."""
    headers = getattr(ctx.request, "headers", None) or {}  # the HTTP request's, when the call came over HTTP
    return {"protocol": ctx.protocol_version, "session": headers.get("mcp-session-id")}


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request is one a task may answer: 2026-07-28, and the extension in its client capabilities."""
    if ctx.protocol_version != MODERN:
        return False  # the extension is not defined before 2026-07-28
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and TASKS in capabilities.extensions)


class TasksExtension(Extension):
    identifier = TASKS

    def __init__(
        self,
        store: TaskStore,
        task_tools: dict[str, Work],
        on_event: Callable[[dict[str, Any]], None] = lambda entry: None,
    ) -> None:
        self.store = store
        self.task_tools = task_tools
        self.on_event = on_event
        # Running tasks are kept here so that nothing collects them before they end.
        self._running: set[asyncio.Task[None]] = set()

    def methods(self) -> list[MethodBinding]:
        versions = frozenset({MODERN})
        return [
            MethodBinding("tasks/get", TaskIdParams, self._get, protocol_versions=versions),
            MethodBinding("tasks/update", TaskUpdateParams, self._update, protocol_versions=versions),
            MethodBinding("tasks/cancel", TaskIdParams, self._cancel, protocol_versions=versions),
        ]

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        work = self.task_tools.get(params.name)
        if work is None or not declared(ctx):
            return await call_next(ctx)
        task = self.store.create()
        meta = dict(ctx.meta or {})
        key = meta.get("oz0/idempotency_key")
        self.on_event({"event": "task", "tool": params.name, "taskId": task.task_id, "key": key, **seen_as(ctx)})
        # The task exists before the answer goes out, so a tasks/get for its id resolves from now on. Its work runs
        # after the answer: the request that made it may be long gone (and its client's node with it).
        runner = asyncio.get_running_loop().create_task(self._run(task, work, dict(params.arguments or {})))
        task.runner = runner
        self._running.add(runner)
        runner.add_done_callback(self._running.discard)
        return {"resultType": "task", **task.wire()}

    async def _run(self, task: Task, work: Work, arguments: dict[str, Any]) -> None:
        try:
            result = await work(arguments, task)
            task.end("completed", result=result.model_dump(by_alias=True, mode="json", exclude_none=True))
            self.on_event({"event": "task completed", "taskId": task.task_id})
        except asyncio.CancelledError:
            task.end("cancelled")
            self.on_event({"event": "task cancelled", "taskId": task.task_id})
        except Exception as err:  # a JSON-RPC error for the call: the task failed
            code = err.code if isinstance(err, MCPError) else -32603
            task.end("failed", error={"code": code, "message": str(err)})
            self.on_event({"event": "task failed", "taskId": task.task_id, "error": str(err)})

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        task = self.store.get(params.task_id)
        self.on_event({"event": "tasks/get", "taskId": task.task_id, "status": task.status, **seen_as(ctx)})
        return task.wire()

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: TaskUpdateParams) -> dict[str, Any]:
        task = self.store.get(params.task_id)
        self.on_event({"event": "tasks/update", "taskId": task.task_id, **seen_as(ctx)})
        if task.answered is not None and not task.answered.done():
            task.answered.set_result(params.input_responses)
        return {}  # an acknowledgement

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskIdParams) -> dict[str, Any]:
        task = self.store.get(params.task_id)
        self.on_event({"event": "tasks/cancel", "taskId": task.task_id, **seen_as(ctx)})
        if task.runner is not None and not task.runner.done():
            task.runner.cancel()  # acknowledged now; the status turns cancelled once the work has unwound
        return {}
