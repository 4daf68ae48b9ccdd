"""Fixtures for simulator tests: real uvicorn servers on free loopback ports, real clients."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from dspark_sim import SimConfig, SimServer
from tests.sim.helpers import FAST


@pytest.fixture
def new_sim() -> Iterator[Callable[..., SimServer]]:
    """Factory: ``new_sim(**SimConfig overrides)`` -> a running server, stopped after the test."""
    servers: list[SimServer] = []

    def start(**overrides: Any) -> SimServer:
        server = SimServer(SimConfig(**{**FAST, **overrides})).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimServer]:
    """One fast default server shared by a test module (tests must not depend on its counters)."""
    with SimServer(SimConfig(**FAST)) as server:
        yield server


@pytest.fixture(scope="module")
def sim_metrics() -> Iterator[SimServer]:
    """A fast server with per-request metrics enabled."""
    with SimServer(SimConfig(**FAST, per_request_metrics=True)) as server:
        yield server
