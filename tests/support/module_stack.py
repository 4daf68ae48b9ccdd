"""A simulator and a gateway served in threads for a whole test module, with an admin key."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dspark_sim import SimConfig, create_sim_app
from gateway.app import create_app
from gateway.config import Settings
from tests.support.keys import create_key
from tests.support.servers import ThreadedServer


@contextlib.contextmanager
def served_with_admin(folder: Path, sim: SimConfig, **settings: Any) -> Iterator[tuple[ThreadedServer, str]]:
    """The gateway (``settings`` over a SQLite database and files in ``folder``) in front of a simulator
    (``sim``), and the plaintext of an ``admin`` key ("ops"); both servers stop when the block ends."""
    database_url = f"sqlite+aiosqlite:///{folder / 'gateway.db'}"
    secret = create_key(database_url, "ops", scopes=["admin"])
    upstream = ThreadedServer(create_sim_app(sim)).start()
    try:
        config = Settings(
            upstream=upstream.url, database_url=database_url, files_dir=folder / "files", **settings
        )
        gateway = ThreadedServer(create_app(config)).start()
        try:
            yield gateway, secret
        finally:
            gateway.stop()
    finally:
        upstream.stop()
