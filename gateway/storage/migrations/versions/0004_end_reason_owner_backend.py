"""How each request ended, in the usage ledger (``end_reason``: ``complete``, ``error``,
``client_gone``, ``client_slow``); which backend stores each stored response
(``response_owners.backend``, its name in ``GATEWAY_UPSTREAM``); a key's longest acceptable queue
wait (``api_keys.max_wait_s``) and request class (``api_keys.request_class``: ``interactive`` or
``batch``). All nullable (rows written before have none: a response without a backend is looked for
on the first backend up, as before; a key without them waits as long as the queue allows, as
``interactive``).

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

from typing import Any

from alembic import op
from sqlalchemy import Column, Float, String
from sqlalchemy.types import TypeEngine

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_COLUMNS: tuple[tuple[str, str, TypeEngine[Any]], ...] = (
    ("usage_ledger", "end_reason", String(16)),
    ("response_owners", "backend", String(64)),
    ("api_keys", "max_wait_s", Float()),
    ("api_keys", "request_class", String(16)),
)


def upgrade() -> None:
    for table, name, kind in _COLUMNS:
        with op.batch_alter_table(table) as batch:
            batch.add_column(Column(name, kind, nullable=True))


def downgrade() -> None:
    for table, name, _kind in reversed(_COLUMNS):
        with op.batch_alter_table(table) as batch:
            batch.drop_column(name)
