"""The batch a usage row's request was a line of (``usage_ledger.batch_id``, indexed: usage grouped by
batch); rows written before, and requests clients sent, have none.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Column, String

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        batch.add_column(Column("batch_id", String(40), nullable=True))
    op.create_index("ix_usage_ledger_batch_id", "usage_ledger", ["batch_id"])


def downgrade() -> None:
    op.drop_index("ix_usage_ledger_batch_id", "usage_ledger")
    with op.batch_alter_table("usage_ledger") as batch:
        batch.drop_column("batch_id")
