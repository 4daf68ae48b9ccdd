"""The database, for commands that act on it directly (no gateway running): opened for one command,
named on stderr (password hidden), every failure to use it one line naming it."""

from __future__ import annotations

import asyncio
import os
import pwd
from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.admin.key_admin import Actor
from gateway.auth import Principal
from gateway.cli.failures import CliError, describe
from gateway.cli.settings import announce_database, shown_url
from gateway.config import Settings
from gateway.db import open_engine
from gateway.migrations.schema import SchemaError

T = TypeVar("T")


def on_database(config: Settings, work: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """``work`` on an engine of ``config.database_url`` (announced first), disposed of afterwards.

    Raises :class:`CliError`: the schema's own one-line refusal, or ``database URL: Type: message``
    for a database that cannot be reached, opened or read.
    """
    url = config.database_url
    announce_database(url)

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


def local_actor() -> Actor:
    """The audit trail's actor for the CLI on the database: ``cli:<user>`` from client ``local``. The
    user is the process's real one (its uid's passwd entry, its uid without one), not ``$USER``."""
    uid = os.getuid()
    try:
        user = pwd.getpwuid(uid).pw_name
    except KeyError:
        user = str(uid)
    return Actor(Principal(key_id=f"cli:{user}", name=f"cli:{user}", kind="cli"), "local")
