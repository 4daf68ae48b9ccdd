"""The database, for commands that act on it directly (no gateway running): opened for one command,
named on stderr (password hidden), every failure to use it one line naming it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.cli.failures import CliError, describe
from gateway.cli.settings import announce_database, shown_url
from gateway.config import Settings
from gateway.storage.db import open_engine
from gateway.storage.migrations.schema import SchemaError

T = TypeVar("T")


def missing_file(url: str) -> Path | None:
    """The SQLite file ``url`` names when there is none yet (None for a file that exists, an
    in-memory database or a server's URL)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    path = Path(parsed.database).expanduser()
    return None if path.exists() else path


def on_database(config: Settings, work: Callable[[AsyncEngine], Awaitable[T]], create: bool = False) -> T:
    """``work`` on an engine of ``config.database_url`` (announced first), disposed of afterwards.
    A SQLite file that does not exist is made only when ``create`` (``serve``, ``keys create``): a
    mistyped path elsewhere would read an empty database of its own and say nothing was there.

    Raises :class:`CliError`: no such file, the schema's own one-line refusal, or
    ``database URL: Type: message`` for a database that cannot be reached, opened or read.
    """
    url = config.database_url
    announce_database(url)
    missing = missing_file(url)
    if missing is not None and not create:
        raise CliError(
            f"no database at {missing}: check --database-url / GATEWAY_DATABASE_URL "
            "(serve and keys create make a new one)"
        )

    async def run() -> T:
        engine = await open_engine(url)
        try:
            return await work(engine)
        finally:
            await engine.dispose()

    try:
        return asyncio.run(run())
    except SchemaError as exc:
        raise CliError(str(exc)) from exc
    except (OSError, SQLAlchemyError) as exc:  # refused, unreachable, unreadable, not a database
        raise database_failure(url, exc) from exc


def database_failure(url: str, exc: Exception) -> CliError:
    """The one-line failure of a database that cannot be reached, opened or read."""
    return CliError(f"database {shown_url(url)}: {describe(exc)}")
