"""Groups of keys (``key_groups``: a team's shared requests and tokens per minute and token quota), a
key's group (``api_keys.group_id``, nullable: every key written before is in none), and the group of
each request in the usage ledger (``usage_ledger.group_id`` and ``group_name``, nullable: rows
written before were in none). Every existing row is kept.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "key_groups",
        sa.Column("id", sa.String(40), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rpm", sa.Integer(), nullable=True),
        sa.Column("tpm", sa.Integer(), nullable=True),
        sa.Column("quota_tokens", sa.BigInteger(), nullable=True),
        sa.Column("quota_period", sa.String(8), nullable=True),
        sa.Column("quota_mode", sa.String(8), nullable=True),
        sa.Column("metadata", sa.JSON(), nullable=False),
    )
    with op.batch_alter_table("api_keys") as batch:
        batch.add_column(sa.Column("group_id", sa.String(40), nullable=True))
        batch.create_index("ix_api_keys_group_id", ["group_id"])
        batch.create_foreign_key("fk_api_keys_group_id", "key_groups", ["group_id"], ["id"])
    with op.batch_alter_table("usage_ledger") as batch:
        batch.add_column(sa.Column("group_id", sa.String(40), nullable=True))
        batch.add_column(sa.Column("group_name", sa.String(200), nullable=True))
        batch.create_index("ix_usage_ledger_group_id", ["group_id"])


def downgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        batch.drop_index("ix_usage_ledger_group_id")
        batch.drop_column("group_name")
        batch.drop_column("group_id")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_constraint("fk_api_keys_group_id", type_="foreignkey")
        batch.drop_index("ix_api_keys_group_id")
        batch.drop_column("group_id")
    op.drop_table("key_groups")
