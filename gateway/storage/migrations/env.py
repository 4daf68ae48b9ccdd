"""Alembic's environment for the gateway's revisions (``versions/``).

Migrations run on a connection the caller holds, passed in ``config.attributes["connection"]``
(Alembic's cookbook, "Sharing a Connection across one or more programmatic migration commands"; with
the async engine, the caller is inside ``AsyncConnection.run_sync``:
:mod:`gateway.storage.migrations.schema`).
That connection is already in a transaction, so Alembic opens none of its own: the caller's commit
applies every step at once, or none.
"""

from alembic import context

from gateway.storage.tables import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("the gateway's migrations run on a caller's connection: `dspark-gateway db upgrade`")
# target_metadata is what autogenerate compares the database with when a revision is drafted, and
# render_as_batch has it draft SQLite-safe batch operations
context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
