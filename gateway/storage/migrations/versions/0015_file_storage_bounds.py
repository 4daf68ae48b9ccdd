"""When an uploaded file expires (``files.expires_at``: OpenAI's ``expires_after``, else
``GATEWAY_FILES_DEFAULT_EXPIRY_S``; null: kept until deleted), indexed for the sweep that deletes
expired files. Files recorded before have none.

Revision ID: 0015
Revises: 0014
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Column, DateTime

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("files") as batch:
        batch.add_column(Column("expires_at", DateTime(timezone=True), nullable=True))
    op.create_index("ix_files_expires_at", "files", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_files_expires_at", "files")
    with op.batch_alter_table("files") as batch:
        batch.drop_column("expires_at")
