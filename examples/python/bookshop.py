"""The second seed's Bookshop, as it is written there, plus a line in OZ0_RECEIVED_LOG at each step.

`order_book` holds a copy while the customer pays, and releases it in `finally`, in a shielded scope bounded to 5 s:
in a cancelled task every await raises, so without the shield `release_hold` would stop at its first line.
`rebuild_index` is a plain `def`: it runs in a thread, which nothing can interrupt from outside, so it asks
`anyio.from_thread.check_cancelled()` between books, and puts search back online in a plain `finally`.

No SIGTERM handler on purpose: oz0 stops a sandboxed server by closing its stdin first and giving it
`node.stdinGraceSeconds` to exit on its own, which runs this cleanup (C3).
"""

from __future__ import annotations

import os
import time

import anyio
import anyio.from_thread
from mcp.server.mcpserver import MCPServer

from oz0_kit import record, serve

mcp = MCPServer("Bookshop")

holds: set[str] = set()
offline: set[str] = set()
PAY_SECONDS = float(os.environ.get("BOOKSHOP_PAY_SECONDS", "30"))
SECONDS_PER_BOOK = float(os.environ.get("BOOKSHOP_SECONDS_PER_BOOK", "1"))


async def take_payment(title: str) -> None:
    await anyio.sleep(PAY_SECONDS)  # the customer is typing a card number


async def release_hold(title: str) -> None:
    await anyio.sleep(0.1)  # a round trip to the stock system
    holds.discard(title)


@mcp.tool()
async def order_book(title: str) -> str:
    """Hold a copy of a book while the customer pays for it."""
    holds.add(title)
    record({"tool": "order_book", "event": "hold", "title": title})
    try:
        await take_payment(title)
        record({"tool": "order_book", "event": "ordered", "title": title})
        return f"Ordered {title!r}."
    except anyio.get_cancelled_exc_class():
        record({"tool": "order_book", "event": "cancelled", "title": title})
        raise
    finally:
        with anyio.move_on_after(5, shield=True):
            await release_hold(title)
            record({"tool": "order_book", "event": "released", "title": title, "held": sorted(holds)})


def index_book(title: str) -> None:
    time.sleep(SECONDS_PER_BOOK)  # slow work with nothing to await


@mcp.tool()
def rebuild_index(titles: list[str]) -> str:
    """Take search offline and rebuild its index, one book at a time."""
    offline.add("search")
    record({"tool": "rebuild_index", "event": "offline", "books": len(titles)})
    indexed = 0
    try:
        for title in titles:
            anyio.from_thread.check_cancelled()
            index_book(title)
            indexed += 1
            record({"tool": "rebuild_index", "event": "indexed", "title": title, "indexed": indexed})
        return f"Indexed {len(titles)} books."
    finally:
        offline.discard("search")
        record({"tool": "rebuild_index", "event": "online", "indexed": indexed})


if __name__ == "__main__":
    serve(mcp)
