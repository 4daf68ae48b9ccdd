"""``dspark-gateway db``: the database's schema — where it stands (``current``) and moving it to the one
this gateway runs on (``upgrade``). ``serve`` refuses any other schema (:mod:`gateway.storage.migrations`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import typer
from sqlalchemy import Connection
from sqlalchemy.exc import SQLAlchemyError

from gateway.cli.local import database_failure, missing_file
from gateway.cli.options import DatabaseOpt
from gateway.cli.settings import fail, settings
from gateway.storage.db import on_connection
from gateway.storage.migrations import schema

db_app = typer.Typer(
    help="The database's schema: where it stands, and upgrading it.",
    no_args_is_help=True,
    rich_markup_mode=None,
)

T = TypeVar("T")


def _run(database_url: str | None, work: Callable[[Connection], T], create: bool = False) -> T:
    """``work`` on the database in one transaction, committed if it returns. A SQLite file that does
    not exist (a mistyped path) is refused unless ``create``; that, its
    :class:`~gateway.storage.migrations.schema.SchemaError`, or a database that cannot be reached or read, is
    the command's one-line error."""
    url = settings(database_url=database_url).database_url
    missing = missing_file(url)
    if missing is not None and not create:
        raise fail(f"no database at {missing}: check --database-url / GATEWAY_DATABASE_URL")
    try:
        return asyncio.run(on_connection(url, work))
    except schema.SchemaError as exc:
        raise fail(str(exc)) from None
    except (OSError, SQLAlchemyError) as exc:
        raise database_failure(url, exc) from exc


def _current(conn: Connection) -> str:
    found, newest, url = schema.find(conn), schema.head(), schema.where(conn)
    if found.revision is None:
        return f"{url}: no schema yet (`serve` or `{schema.UPGRADE_COMMAND}` creates it)"
    state = found.describe()
    if found.revision == newest:
        verdict = "this gateway's"
    elif schema.known(found.revision):
        verdict = f"this gateway needs {schema.label(newest)}: run `{schema.UPGRADE_COMMAND}`"
    else:
        verdict = f"newer than this gateway's {schema.label(newest)}"
    return f"{url}: schema {state}; {verdict}"


def _upgrade(conn: Connection) -> str:
    found, now = schema.upgrade(conn)
    url = schema.where(conn)
    if found.revision is None:
        return f"created the schema {schema.label(now)} in {url}"
    if found.revision == now:
        return f"{url} is at {schema.label(now)} already: nothing to do"
    if found.versioned:
        return f"upgraded {url} from {schema.label(found.revision)} to {schema.label(now)}"
    return (
        f"upgraded {url} from {found.describe()} to {schema.label(now)} "
        f"(aligned with {found.revision} and stamped first: it had no alembic_version)"
    )


@db_app.command()
def current(database_url: DatabaseOpt = None) -> None:
    """Print the database's schema revision and whether this gateway runs on it."""
    typer.echo(_run(database_url, _current))


@db_app.command()
def upgrade(database_url: DatabaseOpt = None) -> None:
    """Upgrade the database to this gateway's schema (back it up first): in one transaction on
    PostgreSQL, a write lock per step on SQLite. A 0.1.0 database (tables, no alembic_version) is
    recognised, aligned with 0001 and stamped first; a newer schema is refused; an empty one gets
    the schema."""
    typer.echo(_run(database_url, _upgrade, create=True))
