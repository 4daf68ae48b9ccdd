"""Client-disconnect detection for the phase before a response exists.

Uvicorn keeps running a handler after its client has gone; without this, a client that gave up while
queued would still take a slot and send its prompt to vLLM. Once a :class:`RelayResponse` is
streaming, Starlette's own disconnect listener takes over (one place per phase).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from starlette.types import Receive

from gateway.errors import GatewayError

T = TypeVar("T")


class ClientDisconnectedError(GatewayError):
    """The client closed the connection before the gateway could answer (logged as 499, nginx's code)."""

    def __init__(self) -> None:
        super().__init__(499, "Client closed the request.", code="client_closed_request")


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the ASGI server reports ``http.disconnect`` (the request body is already read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work()`` in this task; cancel it if the client disconnects meanwhile.

    Returns what ``work`` returns. Raises :class:`ClientDisconnectedError` if the client left first:
    ``work`` then sees ``CancelledError`` and must release what it took (Admission and the Forwarder
    do). Cancellation from elsewhere (server shutdown) propagates unchanged.
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
            raise ClientDisconnectedError() from None
        raise
    finally:
        watcher.cancel()
