"""Real servers for tests: an ASGI app under uvicorn, configured as ``dspark-gateway serve`` configures it
(:func:`gateway.cli.serve.server_config`), on a free loopback port, in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn

from gateway.cli.serve import server_config
from tests.support.probes import START_TIMEOUT_S


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ThreadedServer:
    """``uvicorn.Server`` in a thread: ``start()`` returns once it accepts connections; ``stop()`` joins."""

    def __init__(self, app: Any, port: int | None = None) -> None:
        self.app = app
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        settings = getattr(getattr(app, "state", None), "settings", None)  # a gateway's server settings
        config = server_config(app, "127.0.0.1", self.port, settings, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self, timeout_s: float = START_TIMEOUT_S) -> ThreadedServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"server on port {self.port} failed to start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=20)
