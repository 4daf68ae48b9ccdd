"""Run the gateway under uvicorn, and the built-in simulator beside it when no upstream is configured."""

from __future__ import annotations

import asyncio
import logging
import socket

import uvicorn

from gateway.app import create_app
from gateway.config import Settings


def free_loopback_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def run_gateway(settings: Settings) -> None:
    """Serve until SIGINT/SIGTERM. With ``settings.upstream`` unset, serve the simulator on loopback too."""
    simulator: uvicorn.Server | None = None
    if settings.upstream is None:
        from gateway.sim import SimConfig, create_sim_app

        sim_port = free_loopback_port()
        simulator = uvicorn.Server(
            uvicorn.Config(
                create_sim_app(SimConfig(served_model_name=settings.served_model)),
                host="127.0.0.1",
                port=sim_port,
                log_level="warning",
            )
        )
        settings = settings.model_copy(update={"upstream": f"http://127.0.0.1:{sim_port}"})
    gateway = uvicorn.Server(uvicorn.Config(create_app(settings), host=settings.host, port=settings.port))
    if simulator is None:
        await gateway.serve()
        return
    sim_task = asyncio.create_task(simulator.serve())
    while not simulator.started:
        if sim_task.done():
            await sim_task
            raise RuntimeError("the simulator failed to start")
        await asyncio.sleep(0.05)
    logging.getLogger("uvicorn.error").warning(
        "No upstream configured: forwarding to the built-in SIMULATOR at %s (not a real model).",
        settings.upstream,
    )
    try:
        await gateway.serve()
    finally:
        simulator.should_exit = True
        await sim_task
