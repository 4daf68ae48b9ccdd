"""Fixtures of the reliability tests: the gateway as a real child process (signals, kill -9)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.gateway_process import GatewayProcess, clean_env


@pytest.fixture
def gateway_processes(tmp_path: Path) -> Iterator[Callable[..., GatewayProcess]]:
    """Factory: ``start(upstream, database_url, **settings)`` -> a started ``dspark-gateway serve``
    process (``GATEWAY_<SETTING>`` for each setting); their shared log's last 200 lines printed at the
    end."""
    started: list[GatewayProcess] = []

    def start(upstream: str, database_url: str, **settings: object) -> GatewayProcess:
        env = clean_env(upstream=upstream, database_url=database_url, **settings)
        process = GatewayProcess(env, tmp_path / "gateway.log").start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()
    log = tmp_path / "gateway.log"
    if log.exists():  # pytest shows a test's captured output only when it failed: the gateways' story
        print("".join(log.read_text(errors="replace").splitlines(keepends=True)[-200:]))
