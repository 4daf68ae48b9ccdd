"""A gateway of its own for the README's scripts (``make demo``, ``make screenshots``): ``dspark-gateway
serve`` on a free loopback port with the built-in simulator and a throwaway database, its CLI on that
database, and everything stopped and removed afterwards (its log shown if something failed)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent / "dspark-gateway"


@dataclass(frozen=True)
class LocalGateway:
    """A running gateway at ``url``; ``env`` runs its CLI on its database."""

    url: str
    port: int
    env: dict[str, str]

    def cli(self, *args: str) -> str:
        """``dspark-gateway *args`` on the gateway's database: its stdout."""
        done = subprocess.run([str(BIN), *args], env=self.env, check=True, capture_output=True, text=True)
        return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(url: str, server: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("the gateway exited during startup")
        try:
            if httpx.get(url + "/ready", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the gateway did not become ready")


@contextlib.contextmanager
def local_gateway(**settings: str) -> Iterator[LocalGateway]:
    """The gateway, serving until the block ends; ``settings`` as ``GATEWAY_*`` variables."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "GATEWAY_DATABASE_URL": f"sqlite+aiosqlite:///{tmp}/gateway.db"}
        env.pop("GATEWAY_UPSTREAM", None)
        env.update({f"GATEWAY_{name.upper()}": value for name, value in settings.items()})
        log_path = Path(tmp) / "gateway.log"
        with log_path.open("wb") as log:
            server = subprocess.Popen(
                [str(BIN), "serve", "--port", str(port)], env=env, stdout=log, stderr=log
            )
            try:
                wait_ready(url, server)
                yield LocalGateway(url, port, env)
            except BaseException:
                log.flush()
                print("\n--- gateway log ---\n" + log_path.read_text(), file=sys.stderr)
                raise
            finally:
                server.terminate()
                server.wait(timeout=15)
