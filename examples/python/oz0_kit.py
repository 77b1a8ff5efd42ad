"""What a Python MCP server needs to take part in oz0, on the MCP Python SDK (PyPI `mcp` 2.x).

The same parts as the TypeScript kit `oz0/plugin` (docs/plugin-authors-python.md says how each is used):
read the idempotency key, keep key -> answer where a restart does not lose it, answer busy, report progress with
a resume token, and serve stdio or Streamable HTTP. Only the standard library and the MCP SDK.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import secrets
import socket
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ProgressNotification, ProgressNotificationParams, TextContent

IDEMPOTENCY_KEY = "oz0/idempotency_key"
RETRYABLE = "oz0/retryable"
RETRY_AFTER = "oz0/retry_after"
RESUME = "oz0/resume"

_INSTANCE = secrets.token_hex(4)


def record(entry: dict[str, Any]) -> None:
    """Appends `{t, pid, instance, ...entry}` as a JSON line to OZ0_RECEIVED_LOG, if set: what this server received
    and did.

    The tests read it (the same format as the TypeScript examples' `recordReceived`). Written at once, so the line is
    on disk before the handler goes on. `instance` tells processes apart where a pid cannot: in a sandbox the pid is
    its namespace's, the same in every sandbox.
    """
    file = os.environ.get("OZ0_RECEIVED_LOG")
    if not file:
        return
    line = json.dumps({"t": int(time.time() * 1000), "pid": os.getpid(), "instance": _INSTANCE, **entry})
    with open(file, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def request_meta(ctx: Context) -> dict[str, Any]:
    """The request's `_meta`: the key, the progress token and, on a later attempt, the resume request."""
    return dict(ctx.request_context.meta or {})


def idempotency_key(ctx: Context) -> str | None:
    """`_meta["oz0/idempotency_key"]`: the same on every attempt of one call (K1)."""
    key = request_meta(ctx).get(IDEMPOTENCY_KEY)
    return key if isinstance(key, str) and key else None


def resume_request(ctx: Context) -> dict[str, Any] | None:
    """`_meta["oz0/resume"]` = {"token", "progress"} when oz0 resumes this call (P3); None when it starts over."""
    value = request_meta(ctx).get(RESUME)
    if isinstance(value, dict) and isinstance(value.get("token"), str):
        return value
    return None


def text_result(text: str, structured: dict[str, Any] | None = None, is_error: bool = False) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured, is_error=is_error
    )


def busy(text: str, retry_after: float | None = None) -> CallToolResult:
    """A busy answer (B1): an error result whose `_meta` says oz0 may try again, after `retry_after` seconds."""
    meta: dict[str, Any] = {RETRYABLE: True}
    if retry_after is not None:
        meta[RETRY_AFTER] = retry_after  # seconds, from the provider's Retry-After
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True, _meta=meta)


async def progress(ctx: Context, done: float, total: float | None = None, token: str | None = None) -> None:
    """Reports progress, with a resume token in its `_meta` (P3).

    `ctx.report_progress` cannot carry `_meta`, so the notification is built here and sent on the request's session,
    under the progress token the caller sent. Nothing is sent when the caller asked for no progress.
    """
    meta = request_meta(ctx)
    # The SDK parses `_meta.progressToken` into the key `progress_token`.
    progress_token = meta.get("progress_token", meta.get("progressToken"))
    if progress_token is None:
        return
    params = ProgressNotificationParams(
        progress_token=progress_token, progress=done, total=total, _meta={RESUME: token} if token else None
    )
    await ctx.request_context.session.send_notification(
        ProgressNotification(params=params), related_request_id=ctx.request_context.request_id
    )


class KeyReuse(Exception):
    """A key seen before with other arguments: refused, never answered with another call's answer."""


class KeyStore:
    """key -> answer in SQLite (WAL, synchronous=FULL): each answer is committed, its fsync done, before it is sent.

    `once(key, tool, args, fn)` runs `fn` at most once per key. A key it has, with the same tool and arguments, gets the
    kept answer; other arguments raise KeyReuse. While a key's `fn` runs, another call of that key in this process
    waits for it, and one in another live process is answered busy. A claim left by a process that died is taken over
    (`interrupted=True`: check with the service, by the key, before acting again). When `fn` raises, nothing is kept.
    A busy answer is returned but not kept, so oz0's retry under the same key acts.
    """

    def __init__(self, file: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(file)), exist_ok=True)
        self.db = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("PRAGMA busy_timeout=5000")
        self.db.execute(
            "CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, tool TEXT, args TEXT, answer TEXT, owner INTEGER)"
        )
        self.running: dict[str, asyncio.Future[CallToolResult]] = {}

    def records(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT key, tool, args FROM answers WHERE answer IS NOT NULL").fetchall()
        return [{"key": key, "tool": tool, "args": json.loads(args)} for key, tool, args in rows]

    def _claim(self, key: str, tool: str, args_json: str) -> tuple[str, Any]:
        """In one transaction: ('answer', result) | ('wait', None) | ('busy', pid) | ('run', interrupted)."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.db.execute("SELECT tool, args, answer, owner FROM answers WHERE key = ?", (key,)).fetchone()
            if row is not None and (row[0] != tool or row[1] != args_json):
                raise KeyReuse(f"key {key} was used by {row[0]}({row[1]}); this call is {tool}({args_json})")
            if row is not None and row[2] is not None:
                return ("answer", json.loads(row[2]))
            interrupted = False
            if row is not None:
                if row[3] == os.getpid():
                    return ("wait", None)
                if _alive(row[3]):
                    return ("busy", row[3])
                interrupted = True
            self.db.execute(
                "INSERT OR REPLACE INTO answers (key, tool, args, answer, owner) VALUES (?, ?, ?, NULL, ?)",
                (key, tool, args_json, os.getpid()),
            )
            return ("run", interrupted)
        finally:
            self.db.execute("COMMIT")

    async def once(
        self,
        key: str,
        tool: str,
        args: dict[str, Any],
        fn: Callable[[bool], Awaitable[CallToolResult]],
    ) -> CallToolResult:
        args_json = json.dumps(args, sort_keys=True, separators=(",", ":"))
        while True:
            state, value = self._claim(key, tool, args_json)
            if state == "answer":
                return CallToolResult.model_validate(value)
            if state == "busy":
                return busy(f"another attempt with this key is still running (pid {value})", 1)
            if state == "wait":
                if key in self.running:
                    await asyncio.shield(self.running[key])
                    continue
                value = True  # a claim of this pid with nothing running: an earlier process that had this pid
            break
        future: asyncio.Future[CallToolResult] = asyncio.get_running_loop().create_future()
        self.running[key] = future
        try:
            result = await fn(value is True)
        except BaseException:
            self.db.execute("DELETE FROM answers WHERE key = ? AND answer IS NULL", (key,))
            raise
        finally:
            self.running.pop(key, None)
            if not future.done():
                future.set_result(CallToolResult(content=[]))
        if result.meta and result.meta.get(RETRYABLE) is True:
            self.db.execute("DELETE FROM answers WHERE key = ? AND answer IS NULL", (key,))
        else:
            answer = result.model_dump(by_alias=True, mode="json", exclude_none=True)
            self.db.execute("UPDATE answers SET answer = ?, owner = NULL WHERE key = ?", (json.dumps(answer), key))
        return result


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


async def keyed(
    store: KeyStore,
    tool: str,
    ctx: Context,
    args: dict[str, Any],
    fn: Callable[[bool], Awaitable[CallToolResult]],
) -> CallToolResult:
    """Runs a write once per key: no key, or a key reused with other arguments, is an error result."""
    key = idempotency_key(ctx)
    if key is None:
        return text_result(f'{tool} needs _meta["{IDEMPOTENCY_KEY}"]', is_error=True)
    try:
        return await store.once(key, tool, args, fn)
    except KeyReuse as err:
        return text_result(str(err), is_error=True)


def export_spans(service: str) -> None:
    """O3: the MCP Python SDK makes a span of each request it serves, a child of the `traceparent` in its `_meta`
    (mcp.server._otel.OpenTelemetryMiddleware, on by default). With OTEL_EXPORTER_OTLP_ENDPOINT set and the SDK and
    exporter installed (requirements.txt), they go out over OTLP (http/protobuf): a call's server span joins oz0's."""
    if not (os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")):
        return
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as err:
        print(f"tracing off: {err}", file=sys.stderr, flush=True)
        return
    name = os.environ.get("OTEL_SERVICE_NAME") or service
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)


def serve(mcp: MCPServer, argv: list[str] | None = None) -> None:
    """stdio by default; `--http PORT` serves Streamable HTTP (stateful, SSE responses, so cancels reach handlers)
    on 127.0.0.1 and prints `listening <url>` on stderr. PORT 0 picks a free port. An exit on its own is recorded.
    Its spans go out over OTLP when OTEL_EXPORTER_OTLP_ENDPOINT says where (export_spans)."""
    argv = sys.argv[1:] if argv is None else argv
    atexit.register(lambda: record({"event": "exit"}))
    export_spans(mcp.name)
    if not argv:
        mcp.run()
        return
    if argv[0] != "--http" or len(argv) != 2:
        raise SystemExit("usage: [--http PORT]")
    import anyio
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", int(argv[1])))
    port = sock.getsockname()[1]
    # json_response=False and stateless_http=False: on 2026-07-28 the first, on older revisions the second, would
    # turn cancellation off (measured: docs/cancellation.md, "Which server modes lose cancellation").
    app = mcp.streamable_http_app(json_response=False, stateless_http=False)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(f"listening http://127.0.0.1:{port}/mcp", file=sys.stderr, flush=True)
    anyio.run(lambda: server.serve(sockets=[sock]))
