"""Serving the simulator: ``run_sim`` (blocking, for the CLI) and ``SimServer`` (a background thread on
a free loopback port, for tests and demos that need a real HTTP server)."""

from __future__ import annotations

import copy
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG

from .app import create_sim_app
from .config import SimConfig


def run_sim(
    config: SimConfig | None = None, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info"
) -> None:
    """Serve the simulator with uvicorn until interrupted (blocks)."""
    app = create_sim_app(config)
    uvicorn.run(app, host=host, port=port, log_level=log_level, log_config=log_config(log_level))


def log_config(level: str = "info") -> dict[str, Any]:
    """uvicorn's logging config plus the ``dspark_sim`` logger on uvicorn's console handler, so the
    "this is a simulator" startup line shows wherever uvicorn's own lines do."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["dspark_sim"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    return config


class SimServer:
    """A simulator on ``127.0.0.1:<free port>`` in a daemon thread; use as a context manager.

    ``base_url`` is ``http://127.0.0.1:<port>`` (append ``/v1`` for the OpenAI SDK).
    """

    def __init__(
        self, config: SimConfig | None = None, *, log_level: str = "warning", startup_timeout_s: float = 10.0
    ) -> None:
        self.config = config or SimConfig()
        self.app = create_sim_app(self.config)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._socket.bind(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        self.base_url = f"http://127.0.0.1:{self.port}"
        config_ = uvicorn.Config(
            self.app, log_level=log_level, log_config=log_config(log_level), timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config_)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [self._socket]},
            name=f"dspark-sim:{self.port}",
            daemon=True,
        )
        self._startup_timeout_s = startup_timeout_s

    def start(self) -> SimServer:
        """Start serving; returns once the server accepts connections."""
        self._thread.start()
        deadline = time.monotonic() + self._startup_timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("simulator server failed to start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        """Ask uvicorn to exit and wait for the thread (open streams get a short grace period)."""
        self._server.should_exit = True
        self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> SimServer:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
