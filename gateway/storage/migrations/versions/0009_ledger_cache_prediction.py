"""The prompt tokens admission expected the backend's prefix cache to hold, and from what it knew
(``events`` | ``estimate``), in the usage ledger beside the ``cached_tokens`` vLLM reported, and the
agent session the request was a turn of; rows written before have none.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Column, Integer, String

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        batch.add_column(Column("cached_tokens_predicted", Integer, nullable=True))
        batch.add_column(Column("cache_source", String(16), nullable=True))
        batch.add_column(Column("session", String(16), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        batch.drop_column("session")
        batch.drop_column("cache_source")
        batch.drop_column("cached_tokens_predicted")
