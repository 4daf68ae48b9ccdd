"""Per-key model aliases: ``api_keys.aliases``, a JSON map ``{alias: served model name}`` (null: none).

Batch mode: SQLite alters tables by copying them where its ``ALTER TABLE`` falls short (Alembic's
"batch migrations"); adding a nullable column needs no copy, dropping one may.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import JSON, Column

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(Column("aliases", JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("aliases")
