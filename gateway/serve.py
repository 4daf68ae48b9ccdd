"""Run the gateway under uvicorn, and the built-in simulator beside it when no upstream is configured."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from collections.abc import Iterator

import uvicorn

from gateway.app import create_app
from gateway.config import Settings


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signals to the gateway server running beside it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _simulator(settings: Settings) -> tuple[_EmbeddedServer, str]:
    from gateway.sim import SimConfig, create_sim_app

    port = free_loopback_port()
    app = create_sim_app(SimConfig(served_model_name=settings.served_model))
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    return _EmbeddedServer(config), f"http://127.0.0.1:{port}"


async def run_gateway(settings: Settings) -> None:
    """Serve until SIGINT/SIGTERM, then drain and return (exit status 0).

    With ``settings.upstream`` unset, the simulator is served on a free loopback port in the same
    process and event loop, and the gateway forwards to it (logged as a warning).
    """
    # uvicorn re-raises the signal it handled after a graceful shutdown, for outer handlers; ours
    # have nothing left to do, so the process ends with status 0 instead of dying by the signal.
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: None)
    simulator: _EmbeddedServer | None = None
    sim_task: asyncio.Task[None] | None = None
    if settings.upstream is None:
        simulator, sim_url = _simulator(settings)
        sim_task = asyncio.create_task(simulator.serve())
        while not simulator.started:
            if sim_task.done():
                await sim_task
                raise RuntimeError("the simulator failed to start")
            await asyncio.sleep(0.05)
        settings = settings.model_copy(update={"upstream": sim_url})
        logging.getLogger("uvicorn.error").warning(
            "No upstream configured: forwarding to the built-in SIMULATOR at %s (not a real model).",
            sim_url,
        )
    gateway = uvicorn.Server(uvicorn.Config(create_app(settings), host=settings.host, port=settings.port))
    try:
        await gateway.serve()
    finally:
        if simulator is not None and sim_task is not None:
            simulator.should_exit = True
            await sim_task
