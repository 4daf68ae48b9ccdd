"""Where a database's schema stands against the gateway's revisions, and moving it to the newest.

A database is *empty* (none of the gateway's tables), *unversioned* (one of the shapes of tables that
0.1.0's gateways made with ``create_all``, :mod:`gateway.storage.migrations.unversioned`, and no
``alembic_version``) or at a revision (Alembic's ``alembic_version`` table).
The functions take a SQLAlchemy ``Connection`` in a transaction and are synchronous: with the async
engine they run inside ``AsyncConnection.run_sync`` (Alembic's cookbook, "Using Asyncio with Alembic",
programmatic use). They change nothing the caller does not commit.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, MetaData, inspect, text

from gateway.storage.migrations import unversioned

#: Where the revisions are: this package (``env.py``, ``versions/``), found as package data.
SCRIPT_LOCATION = "gateway.storage:migrations"
#: The revision a release's schema is, as messages name it besides the revision.
RELEASES = {"0001": "0.1.0", "0002": "0.2.0", "0003": "0.3.0", "0004": "0.4.0", "0007": "0.5.0"}
#: The revision an unversioned database is stamped with once its tables are aligned with it.
UNVERSIONED = "0001"
UPGRADE_COMMAND = "dspark-gateway db upgrade"
#: ``pg_advisory_xact_lock`` key of schema changes (any constant no other application of the database
#: uses: these are the bytes of "dsk-schm").
_PG_LOCK = 0x64736B2D7363686D


class SchemaError(Exception):
    """The database's schema is not the one this gateway runs on. The message is one line, for the
    operator, naming what to do; the database's URL in it has no password."""


@dataclass(frozen=True, slots=True)
class Found:
    """Where a database stands: ``revision`` None when it is empty; ``versioned`` False for 0.1.0's
    tables without ``alembic_version`` (then ``revision`` is :data:`UNVERSIONED` and ``shape`` the
    number of their shape in :data:`~gateway.storage.migrations.unversioned.SHAPES`)."""

    revision: str | None
    versioned: bool = True
    shape: int = -1

    def describe(self) -> str:
        """``0003 (0.3.0)``; ``0001 (0.1.0) without alembic_version``; for an older unversioned shape,
        ``0.1.0 as of 809aacf (before 0001) without alembic_version``."""
        if self.revision is None:
            return "no schema"
        if self.versioned:
            return label(self.revision)
        if self.shape in (-1, len(unversioned.SHAPES) - 1):
            return f"{label(self.revision)} without alembic_version"
        commit = unversioned.SHAPES[self.shape].commit
        return f"0.1.0 as of {commit} (before {self.revision}) without alembic_version"


def config(connection: Connection | None = None) -> Config:
    """Alembic's configuration of the gateway's revisions, running on ``connection`` (no ``alembic.ini``)."""
    cfg = Config()
    cfg.set_main_option("script_location", SCRIPT_LOCATION)
    cfg.attributes["connection"] = connection
    return cfg


@functools.cache
def scripts() -> ScriptDirectory:
    """The revisions (read once per process)."""
    return ScriptDirectory.from_config(config())


def head() -> str:
    """The newest revision: the schema this gateway runs on."""
    newest = scripts().get_current_head()
    assert newest is not None, "gateway/storage/migrations/versions holds no revision"
    return newest


def label(revision: str) -> str:
    """``0001 (0.1.0)`` for a released schema, else the revision alone."""
    release = RELEASES.get(revision)
    return f"{revision} ({release})" if release else revision


def where(connection: Connection) -> str:
    """The database's URL as messages show it: the password hidden (``***``)."""
    return connection.engine.url.render_as_string(hide_password=True)


def find(connection: Connection) -> Found:
    """Where the database stands. Raises :class:`SchemaError` for gateway tables without
    ``alembic_version`` that are none of the unversioned shapes, or several revisions at once."""
    heads = MigrationContext.configure(connection).get_current_heads()
    if len(heads) > 1:
        raise SchemaError(f"database {where(connection)} is at several revisions at once: {', '.join(heads)}")
    if heads:
        return Found(heads[0])
    gateway = unversioned.shape(-1).tables.keys()
    if not set(gateway) & set(inspect(connection).get_table_names()):
        return Found(None)
    closest: list[Any] = []
    for number in reversed(range(len(unversioned.SHAPES))):
        differences = compare(connection, unversioned.shape(number), gateway)
        if not differences:
            return Found(UNVERSIONED, versioned=False, shape=number)
        if not closest or len(differences) < len(closest):
            closest = differences
    raise SchemaError(
        f"database {where(connection)} has gateway tables but no alembic_version, and they are not "
        f"0.1.0's ({len(closest)} difference(s), first: {describe(closest[0])}): restore a "
        "backup or align it by hand"
    )


def compare(connection: Connection, metadata: MetaData, tables: Collection[str] = ()) -> list[Any]:
    """Alembic's autogenerate differences between the database and ``metadata`` (empty: the same),
    over ``metadata``'s tables and ``tables`` only (a shared database may hold other applications'
    tables; one of ``tables`` that ``metadata`` lacks is a ``remove_table`` difference)."""
    ours = set(metadata.tables) | set(tables)

    def include_name(name: str | None, type_: str, parent: Any) -> bool:
        return type_ != "table" or name in ours

    context = MigrationContext.configure(connection, opts={"include_name": include_name})
    return list(compare_metadata(context, metadata))


def describe(difference: Any) -> str:
    """One autogenerate difference in a few words: ``add_column api_keys.aliases``."""
    step: Sequence[Any] = difference[0] if isinstance(difference, list) else difference  # modify_*: a list
    kind = step[0]
    if kind in ("add_column", "remove_column"):
        return f"{kind} {step[2]}.{step[3].name}"
    if kind.startswith("modify_"):
        return f"{kind} {step[2]}.{step[3]}"
    return f"{kind} {getattr(step[1], 'name', step[1])}"


def known(revision: str) -> bool:
    """Whether ``revision`` is one of this gateway's (else a newer gateway made it)."""
    return revision in {script.revision for script in scripts().walk_revisions()}


def newer(connection: Connection, revision: str) -> SchemaError:
    """The refusal of a schema this gateway does not know."""
    return SchemaError(
        f"database {where(connection)} has schema {revision}, newer than this gateway's "
        f"{label(head())}: run the gateway release that made it"
    )


def refusal(connection: Connection, found: Found) -> SchemaError | None:
    """Why the gateway may not run on a database that stands at ``found`` (None: it may, that is the
    head)."""
    newest, revision = head(), found.revision
    if revision == newest and found.versioned:
        return None
    if revision is not None and not known(revision):
        return newer(connection, revision)
    return SchemaError(
        f"database {where(connection)} has schema {found.describe()}; this gateway needs "
        f"{label(newest)}: run `{UPGRADE_COMMAND}`"
    )


def lock(connection: Connection) -> None:
    """Serialise schema changes until the transaction ends: two gateways starting on one empty database
    must not both create it. SQLite: ``BEGIN IMMEDIATE`` takes the database's write lock (pysqlite
    begins no transaction before DDL by itself); PostgreSQL: a transaction-level advisory lock."""
    if connection.dialect.name == "sqlite":
        connection.exec_driver_sql("BEGIN IMMEDIATE")
    elif connection.dialect.name == "postgresql":
        connection.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK})


def ensure(connection: Connection) -> None:
    """What opening the database does: create the schema on an empty one (upgrade to head), nothing at
    head; otherwise raise :class:`SchemaError` (an older schema is upgraded by the CLI only)."""
    found = find(connection)
    if found.revision is None:
        lock(connection)
        found = find(connection)  # another process may have created it while this one waited
        if found.revision is None:
            command.upgrade(config(connection), "head")
            return
    error = refusal(connection, found)
    if error is not None:
        raise error


def upgrade(connection: Connection) -> tuple[Found, str]:
    """Upgrade to head: create the schema on an empty database; unversioned tables of 0.1.0 are aligned
    with :data:`UNVERSIONED` (:func:`~gateway.storage.migrations.unversioned.align`) and stamped first.
    Returns where the database stood and the revision it is at now. Raises
    :class:`SchemaError` for a newer schema or tables of no known one."""
    lock(connection)
    found = find(connection)
    if found.revision is not None and not known(found.revision):
        raise newer(connection, found.revision)
    cfg = config(connection)
    if not found.versioned:
        unversioned.align(connection, found.shape)
        command.stamp(cfg, UNVERSIONED)
    command.upgrade(cfg, "head")
    return found, head()
