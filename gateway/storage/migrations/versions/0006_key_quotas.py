"""A key's token quota (:mod:`gateway.limits.quota`): ``api_keys.quota_tokens`` (cost per period),
``quota_period`` (``day``, ``week``, ``month``) and ``quota_mode`` (``enforce``, ``warn``). Nullable:
a key written before has none, as before.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

from typing import Any

from alembic import op
from sqlalchemy import BigInteger, Column, String
from sqlalchemy.types import TypeEngine

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_COLUMNS: tuple[tuple[str, TypeEngine[Any]], ...] = (
    ("quota_tokens", BigInteger()),
    ("quota_period", String(8)),
    ("quota_mode", String(8)),
)


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        for name, kind in _COLUMNS:
            batch.add_column(Column(name, kind, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        for name, _kind in reversed(_COLUMNS):
            batch.drop_column(name)
