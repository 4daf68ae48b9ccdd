"""Batches (the OpenAI Batch API): table ``batches`` (status, counts, result files, the lease of the
process running it) and ``batch_lines`` (each answered line, once).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import JSON, BigInteger, Boolean, Column, DateTime, Integer, String, Text

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

_WHEN = ("in_progress_at", "finalizing_at", "completed_at", "failed_at", "expired_at", "cancelling_at",
         "cancelled_at")  # fmt: skip


def upgrade() -> None:
    op.create_table(
        "batches",
        Column("id", String(40), primary_key=True),
        Column("key_id", String(40), nullable=False),
        Column("endpoint", String(64), nullable=False),
        Column("input_file_id", String(40), nullable=False),
        Column("completion_window", String(16), nullable=False),
        Column("status", String(16), nullable=False),
        Column("metadata", JSON, nullable=True),
        Column("errors", JSON, nullable=True),
        Column("total", Integer, nullable=False),
        Column("completed", Integer, nullable=False),
        Column("failed", Integer, nullable=False),
        Column("output_file_id", String(40), nullable=True),
        Column("error_file_id", String(40), nullable=True),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("expires_at", DateTime(timezone=True), nullable=False),
        *(Column(name, DateTime(timezone=True), nullable=True) for name in _WHEN),
        Column("holder", String(64), nullable=True),
        Column("lease_until", DateTime(timezone=True), nullable=True),
        Column("fence", BigInteger, nullable=False),
    )
    op.create_index("ix_batches_key_id", "batches", ["key_id"])
    op.create_index("ix_batches_status", "batches", ["status"])
    op.create_index("ix_batches_created_at", "batches", ["created_at"])
    op.create_table(
        "batch_lines",
        Column("batch_id", String(40), primary_key=True),
        Column("line", Integer, primary_key=True),
        Column("custom_id", String(512), nullable=False),
        Column("ok", Boolean, nullable=False),
        Column("result", Text, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("batch_lines")
    for name in ("created_at", "status", "key_id"):
        op.drop_index(f"ix_batches_{name}", "batches")
    op.drop_table("batches")
