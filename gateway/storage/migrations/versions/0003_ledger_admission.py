"""What admission saw of each request, in the usage ledger: ``waited_for`` (JSON ``{reason: s}``),
``prompt_size_tokens`` and ``prompt_size_source`` (``tokenize`` | ``estimate``), ``kv_tokens`` (the KV
reserved) and ``lane`` (``long`` | ``short``); all nullable (rows written before have none).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import JSON, Column, Integer, String

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_COLUMNS = (
    ("waited_for", JSON),
    ("prompt_size_tokens", Integer),
    ("prompt_size_source", String(16)),
    ("kv_tokens", Integer),
    ("lane", String(8)),
)


def upgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        for name, kind in _COLUMNS:
            batch.add_column(Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        for name, _kind in reversed(_COLUMNS):
            batch.drop_column(name)
