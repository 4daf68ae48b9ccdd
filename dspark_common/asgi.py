"""Client-disconnect handling for ASGI handlers, shared by the gateway and the simulator.

uvicorn keeps running a handler whose client has gone, and its ``send`` never raises then: a queued
request would still take a slot and reach the model, a stream would run to its end.
:func:`unless_disconnected` races the work against ``http.disconnect`` and cancels it (the idea of
vLLM's ``with_cancellation``): the gateway's exchanges run under it from the moment their body is
read to their last byte (:mod:`gateway.proxy.respond`), the simulator's streams too
(:class:`dspark_sim.closing.ClosingStreamingResponse`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.types import Receive

T = TypeVar("T")


class ClientDisconnectedError(Exception):
    """The client closed the connection before it could be answered (logged as 499, nginx's code)."""


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the server reports ``http.disconnect`` (call after the request body is read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def unless_disconnected(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work()`` in this task; cancel it if the client disconnects meanwhile.

    Returns what ``work`` returns. Raises :class:`ClientDisconnectedError` if the client left first:
    ``work`` saw ``CancelledError`` and must have released what it took. Cancellation from elsewhere
    (server shutdown) propagates unchanged.
    """
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        await wait_for_disconnect(receive)
        gone = True
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        return await work()
    except asyncio.CancelledError:
        if gone and task.uncancel() == 0:
            raise ClientDisconnectedError from None
        raise
    finally:
        watcher.cancel()
