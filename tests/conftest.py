"""Shared fixtures: the simulator and the gateway as real servers on loopback, API keys, and the
PostgreSQL and Redis servers of the session."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from pathlib import Path
from typing import Any

import pytest
import uvloop
from sqlalchemy import make_url

from dspark_sim import SimConfig, create_sim_app
from gateway.app import create_app
from gateway.auth import KeyStore
from gateway.config import Settings
from tests.support.servers import ThreadedServer
from tests.support.services import ServiceUnavailable, own_database, postgres_server, redis_server


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict[str, Any]:
    """Async tests run on asyncio's default loop; those marked ``uvloop_too`` on uvloop as well, which
    the gateway's server runs on: its transports differ (uvloop binds a protocol's ``data_received``
    once, asyncio looks it up on every read; callbacks of one poll run in another order)."""
    if item.get_closest_marker("uvloop_too") is None:
        return {"asyncio": asyncio.new_event_loop}
    return {"asyncio": asyncio.new_event_loop, "uvloop": uvloop.new_event_loop}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (``make test``) a module's tests run in one worker, so a
    module-scoped fixture starts once; the end-to-end modules share one, whose session holds the vLLM
    servers (each costs a CPU-bound start and GiBs of memory: one worker starts them all once)."""
    end_to_end = Path(__file__).resolve().parent / "e2e"
    for item in items:
        group = "e2e" if item.path.is_relative_to(end_to_end) else item.nodeid.split("::", 1)[0]
        item.add_marker(pytest.mark.xdist_group(group))


FAST_SIM = {"decode_tps": 2000.0, "ttft_base_s": 0.0, "prefill_tps": 1e7}


@pytest.fixture
def start_sim() -> Iterator[Callable[..., ThreadedServer]]:
    """Factory: ``start_sim(**SimConfig fields)`` -> a running simulator (fast by default)."""
    started: list[ThreadedServer] = []

    def start(**fields: Any) -> ThreadedServer:
        server = ThreadedServer(create_sim_app(SimConfig(**{**FAST_SIM, **fields}))).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _service(open_server: Callable[[], AbstractContextManager[str]]) -> Iterator[str]:
    """The server's URL for the session; a test that needs it fails (not skips) when there is none."""
    with ExitStack() as stack:
        try:
            url = stack.enter_context(open_server())
        except ServiceUnavailable as exc:
            raise pytest.fail.Exception(str(exc), pytrace=False) from None
        yield url


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server, ``postgresql+asyncpg://user@host:port/db`` (tests/support/services.py
    says which). Shared by the session: a test keeps its tables in a schema of its own."""
    yield from _service(postgres_server)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A Redis server, ``redis://host:port/db`` (tests/support/services.py says which). Shared by the
    session and never flushed: a test keeps to keys of its own (rate limits are per key id, unique)."""
    yield from _service(redis_server)


@pytest.fixture
def pg_database(postgres_url: str) -> Iterator[str]:
    """An empty database of this test's own on the session's server (dropped after), its URL with a
    password the server's trust auth ignores: messages must not show it."""
    with own_database(postgres_url, "gw_test_") as own:
        url = make_url(own)
        yield url.set(password=url.password or "never-shown").render_as_string(hide_password=False)


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}"


def _on_store(database_url: str, action: Callable[[KeyStore], Any]) -> Any:
    async def run() -> Any:
        store = await KeyStore.open(database_url)
        try:
            return await action(store)
        finally:
            await store.close()

    return asyncio.run(run())


@pytest.fixture
def make_key(database_url: str) -> Callable[..., str]:
    """Factory: ``make_key(name, **KeyStore.create kwargs)`` -> the plaintext key."""
    return lambda name, **kwargs: _on_store(database_url, lambda s: s.create(name, **kwargs))[1]


@pytest.fixture
def admin(make_key: Callable[..., str]) -> str:
    """A plaintext key with the ``admin`` scope."""
    return make_key("admin", scopes=["admin"])


@pytest.fixture
def revoke_key(database_url: str) -> Callable[[str], Any]:
    """``revoke_key(name)``: revoke in the same database, as another process would."""
    return lambda name: _on_store(database_url, lambda s: s.revoke(name))


@pytest.fixture
def start_gateway(database_url: str, tmp_path: Path) -> Iterator[Callable[..., ThreadedServer]]:
    """Factory: ``start_gateway(upstream_url, **Settings fields)`` -> a running gateway (its files in the
    test's folder unless ``files_dir`` is given; on ``port`` if given, else a free one)."""
    started: list[ThreadedServer] = []

    def start(upstream: str, **fields: Any) -> ThreadedServer:
        fields.setdefault("files_dir", tmp_path / "gateway-files")
        settings = Settings(upstream=upstream, database_url=database_url, **fields)
        server = ThreadedServer(create_app(settings), settings.port if "port" in fields else None).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
