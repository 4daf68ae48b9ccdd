"""The serving process: what start-up left alive is frozen out of the cyclic GC's sight, and full
collections are spaced out."""

from __future__ import annotations

import asyncio
import gc

import uvicorn
from starlette.types import Receive, Scope, Send

from gateway.cli.serve import FULL_COLLECTION_EVERY, _GatewayServer
from gateway.http.drain import Drain


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def test_start_up_leaves_the_heap_frozen() -> None:
    """A full collection would otherwise traverse every module, pool and route object (~50 ms on the
    gateway's heap, the event loop standing still): after start-up they are in the permanent
    generation (``gc.get_freeze_count``), and a collection sees only what requests create."""
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    before = gc.get_threshold()
    assert before[2] != FULL_COLLECTION_EVERY
    config = uvicorn.Config(_app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    server = _GatewayServer(config, Drain(), grace_s=1.0, ack_timeout_s=60)
    serving = asyncio.create_task(server.serve())
    try:
        async with asyncio.timeout(10):
            while not server.started:  # noqa: ASYNC110 (uvicorn offers a flag, no event)
                await asyncio.sleep(0.01)
        assert gc.get_freeze_count() > 10_000  # this test process's modules, at least
        assert gc.get_threshold() == (*before[:2], FULL_COLLECTION_EVERY)  # only full collections spaced
    finally:
        server.should_exit = True
        await serving
        gc.unfreeze()
        gc.set_threshold(*before)
