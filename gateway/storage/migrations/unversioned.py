"""The schemas landed gateways made before migrations existed, and aligning one with revision 0001.

Until Alembic came (commit ``d1f8dc9``) every gateway, all with pyproject version 0.1.0, created its
tables with ``create_all`` and wrote no ``alembic_version``. Five shapes of tables landed that way,
each named by the first commit that made it (found by creating a database at every earlier commit
and comparing their DDL; ``tests/data/unversioned/`` holds a database each shape's gateway made):

====  =========  ===========================================================================
 #    commit     what it added
====  =========  ===========================================================================
 0    5518d5f    ``api_keys``: hashes, expiry, revocation, models, scopes
 1    32ef5f5    ``api_keys.default_thinking``
 2    809aacf    ``usage_ledger``
 3    c3f6acc    ``api_keys`` limits, priority, metadata, rotation grace; ``audit_log``
 4    96c9159    ``response_owners``: revision 0001's tables
====  =========  ===========================================================================

Each change only added tables, columns and indexes, so an older shape reaches revision 0001 by adding
what came after it (:func:`align`); no row is rewritten, and the two NOT NULL columns a later shape
added get the values the gateway gave new keys (:data:`FILLS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from sqlalchemy import JSON, Boolean, Column, Connection, DateTime, Float, Integer, MetaData, String, Table


@dataclass(frozen=True, slots=True)
class Shape:
    """One landed shape of unversioned tables: the first commit that made it, and what it added."""

    commit: str
    added: str


SHAPES = (
    Shape("5518d5f", "api_keys"),
    Shape("32ef5f5", "api_keys.default_thinking"),
    Shape("809aacf", "usage_ledger"),
    Shape("c3f6acc", "key limits, rotation and metadata; audit_log"),
    Shape("96c9159", "response_owners"),
)
#: The values of NOT NULL columns added to existing rows: what the gateway gave a key created without
#: them (``priority`` 1: the fair queue's default weight; ``metadata`` an empty object).
FILLS: dict[tuple[str, str], object] = {("api_keys", "priority"): 1, ("api_keys", "metadata"): {}}


def shape(number: int) -> MetaData:
    """The tables ``SHAPES[number]``'s gateway made with ``create_all`` (indexes and uniques included);
    ``shape(-1)`` is revision 0001's schema."""
    number %= len(SHAPES)
    metadata = MetaData()
    thinking = [Column("default_thinking", String(8), nullable=True)] if number >= 1 else []
    limits = (
        [
            Column("rpm", Integer, nullable=True),
            Column("tpm", Integer, nullable=True),
            Column("max_concurrency", Integer, nullable=True),
            Column("priority", Integer, nullable=False),
            Column("metadata", JSON, nullable=False),
            Column("previous_hash", String(64), nullable=True, index=True),
            Column("previous_expires_at", DateTime(timezone=True), nullable=True),
        ]
        if number >= 3
        else []
    )
    Table(
        "api_keys",
        metadata,
        Column("id", String(40), primary_key=True),
        Column("name", String(200), nullable=False, unique=True),
        Column("key_hash", String(64), nullable=False, unique=True, index=True),
        Column("prefix", String(32), nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("expires_at", DateTime(timezone=True), nullable=True),
        Column("revoked_at", DateTime(timezone=True), nullable=True),
        Column("last_used_at", DateTime(timezone=True), nullable=True),
        Column("models", JSON, nullable=True),
        Column("scopes", JSON, nullable=False),
        *thinking,
        *limits,
    )
    if number >= 3:
        Table(
            "audit_log",
            metadata,
            Column("id", Integer, primary_key=True, autoincrement=True),
            Column("at", DateTime(timezone=True), nullable=False, index=True),
            Column("actor", String(200), nullable=False),
            Column("action", String(64), nullable=False),
            Column("target", String(200), nullable=True),
            Column("client", String(100), nullable=True),
            Column("detail", JSON, nullable=False),
        )
    if number >= 2:
        Table(
            "usage_ledger",
            metadata,
            Column("id", Integer, primary_key=True, autoincrement=True),
            Column("request_id", String(128), nullable=False, index=True),
            Column("key_id", String(40), nullable=False, index=True),
            Column("key_name", String(200), nullable=False),
            Column("model", String(200), nullable=False),
            Column("route", String(64), nullable=False),
            Column("stream", Boolean, nullable=False),
            Column("arrived_at", DateTime(timezone=True), nullable=False, index=True),
            Column("status", Integer, nullable=False),
            Column("finish_reason", String(32), nullable=True),
            Column("client_disconnected", Boolean, nullable=False),
            Column("prompt_tokens", Integer, nullable=False),
            Column("completion_tokens", Integer, nullable=False),
            Column("cached_tokens", Integer, nullable=False),
            Column("reasoning_tokens", Integer, nullable=False),
            Column("queue_wait_s", Float, nullable=True),
            Column("ttft_s", Float, nullable=True),
            Column("upstream_ttft_s", Float, nullable=True),
            Column("decode_tokens_per_s", Float, nullable=True),
            Column("e2e_s", Float, nullable=True),
            Column("spec", JSON, nullable=True),
            Column("spec_candidates", JSON, nullable=False),
        )
    if number >= 4:
        Table(
            "response_owners",
            metadata,
            Column("response_id", String(128), primary_key=True),
            Column("key_id", String(40), nullable=False, index=True),
            Column("created_at", DateTime(timezone=True), nullable=False),
        )
    return metadata


def align(connection: Connection, number: int) -> None:
    """Bring a database whose tables are ``shape(number)`` to ``shape(-1)`` in the caller's transaction:
    create the missing tables, add the missing columns (NOT NULL ones filled from :data:`FILLS`, then
    constrained) and indexes. Alembic's operations, in batch mode where SQLite needs a table copy."""
    have, want = shape(number), shape(-1)
    operations = Operations(MigrationContext.configure(connection))
    for name, table in want.tables.items():
        if name not in have.tables:
            table.create(connection)
            continue
        old = have.tables[name]
        added = [column for column in table.columns if column.name not in old.columns]
        if not added:
            continue
        with operations.batch_alter_table(name) as batch:
            for column in added:
                batch.add_column(Column(column.name, column.type, nullable=True))
        fills = {column.name: FILLS[name, column.name] for column in added if not column.nullable}
        if fills:
            connection.execute(table.update().values(fills))
            with operations.batch_alter_table(name) as batch:
                for column_name in fills:
                    batch.alter_column(column_name, existing_type=table.c[column_name].type, nullable=False)
        for index in table.indexes:
            if not {column.name for column in index.columns} <= set(old.columns.keys()):
                index.create(connection)
