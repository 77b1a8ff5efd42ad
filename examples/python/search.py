"""A remote search server in Python that resumes (P3): its listing says `_meta["oz0/resume"]: True`, each progress
notification carries a resume token in its `_meta`, and a request whose `_meta["oz0/resume"]` names a token goes on
from there instead of searching again what was searched.

    .tools/python/bin/python examples/python/search.py --http 8941

SEARCH_STALL_AT=n: the first request of each key stops after n shards and waits to be cancelled (for the tests: an
attempt that runs past its time limit, so the next one resumes). SEARCH_SEEN names a file that keeps which keys were
seen, for a sandboxed server, which is a fresh process on each attempt.
"""

from __future__ import annotations

import json
import os
import re

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations

from oz0_kit import idempotency_key, progress, record, resume_request, serve, text_result

mcp = MCPServer("oz0-python-search")
stall_at = os.environ.get("SEARCH_STALL_AT")
seen_file = os.environ.get("SEARCH_SEEN")
requests: dict[str, int] = {}


def nth_request(key: str) -> int:
    """How many requests of this key came, this one included (kept in SEARCH_SEEN when set)."""
    if seen_file:
        seen = json.load(open(seen_file)) if os.path.exists(seen_file) else {}
        seen[key] = seen.get(key, 0) + 1
        json.dump(seen, open(seen_file, "w"))
        return seen[key]
    requests[key] = requests.get(key, 0) + 1
    return requests[key]


def start_shard(ctx: Context) -> int:
    """Where this request starts: after the shard its resume token names (the token is ours: check it), or 0."""
    resume = resume_request(ctx)
    match = re.fullmatch(r"shard:(\d+)", resume["token"]) if resume else None
    return int(match.group(1)) if match else 0


@mcp.tool(annotations=ToolAnnotations(read_only_hint=True, open_world_hint=True), meta={"oz0/resume": True})
async def search(q: str, ctx: Context, shards: int = 4, shard_ms: int = 200) -> CallToolResult:
    """Search every shard for a query; resumes where an earlier attempt got to."""
    key = idempotency_key(ctx)
    start = start_shard(ctx)
    record({"tool": "search", "key": key, "from": start, "resume": resume_request(ctx)})
    nth = nth_request(key or "")
    for shard in range(start, shards):
        if stall_at is not None and nth == 1 and shard - start == int(stall_at):
            await anyio.sleep_forever()  # the service behind hangs; oz0's time limit cancels this attempt
        await anyio.sleep(shard_ms / 1000)
        record({"tool": "search", "event": "work", "key": key, "shard": shard})
        await progress(ctx, shard + 1, shards, f"shard:{shard + 1}")
    return text_result(f'searched {shards} shards for "{q}"', {"shards": shards})


if __name__ == "__main__":
    serve(mcp)
