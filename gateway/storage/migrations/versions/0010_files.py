"""Files keys upload for batches (the OpenAI Files API): table ``files``, its content kept in the files
directory.

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import BigInteger, Column, DateTime, Integer, String

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "files",
        Column("id", String(40), primary_key=True),
        Column("key_id", String(40), nullable=False),
        Column("filename", String(255), nullable=False),
        Column("purpose", String(32), nullable=False),
        Column("bytes", BigInteger, nullable=False),
        Column("lines", Integer, nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_files_key_id", "files", ["key_id"])
    op.create_index("ix_files_created_at", "files", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_files_created_at", "files")
    op.drop_index("ix_files_key_id", "files")
    op.drop_table("files")
