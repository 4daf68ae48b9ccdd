"""Client-disconnect detection for the phase before a response exists.

Uvicorn keeps running a handler after its client has gone; without this, a client that gave up while
queued would still take a slot and send its prompt to vLLM. Once a :class:`RelayResponse` is
streaming, Starlette's own disconnect listener takes over (one place per phase).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
from starlette.types import Receive

T = TypeVar("T")


class ClientDisconnectedError(Exception):
    """The client closed the connection before the gateway could answer."""


async def wait_for_disconnect(receive: Receive) -> None:
    """Return when the ASGI server reports ``http.disconnect`` (the request body is already read)."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


async def unless_disconnected(receive: Receive, work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work()``; cancel it if the client disconnects meanwhile.

    Returns what ``work`` returns. Raises :class:`ClientDisconnectedError` if the client left first
    (``work`` was cancelled and must release what it took — :class:`~gateway.admission.Admission`
    does). If ``work`` finished first, its result is returned even if the client has just gone; the
    response path notices the disconnect and cleans up.
    """
    async with anyio.create_task_group() as group:

        async def watch() -> None:
            await wait_for_disconnect(receive)
            group.cancel_scope.cancel()

        group.start_soon(watch)
        try:
            return await work()
        finally:
            group.cancel_scope.cancel()
    raise ClientDisconnectedError
