"""The gateway's schema migrations (Alembic): ``env.py``, one revision per file in ``versions/``, and
:mod:`gateway.storage.migrations.schema`, which tells where a database stands and upgrades it.

Revision ``0001`` is the schema of release 0.1.0, ``0002`` adds per-key model aliases, ``0003`` what
admission saw of each request to the usage ledger. The newest
revision must equal :mod:`gateway.storage.tables` (``tests/storage/test_migrations.py`` compares them with
Alembic's ``compare_metadata``): a change to the tables comes with a new revision here, written by
hand or drafted by ``alembic.command.revision(schema.config(connection), message, autogenerate=True)``.
"""
