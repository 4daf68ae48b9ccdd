"""How each request ended, in the usage ledger (``end_reason``: ``complete``, ``error``,
``client_gone``, ``client_slow``), and which backend stores each stored response
(``response_owners.backend``, its name in ``GATEWAY_UPSTREAM``); both nullable (rows written before
have none: a response without one is looked for on the first backend up, as before).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Column, String

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COLUMNS = (("usage_ledger", "end_reason", 16), ("response_owners", "backend", 64))


def upgrade() -> None:
    for table, name, length in _COLUMNS:
        with op.batch_alter_table(table) as batch:
            batch.add_column(Column(name, String(length), nullable=True))


def downgrade() -> None:
    for table, name, _length in reversed(_COLUMNS):
        with op.batch_alter_table(table) as batch:
            batch.drop_column(name)
