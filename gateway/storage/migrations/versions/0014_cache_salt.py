"""Prefix-cache isolation between tenants: ``gateway_secrets`` (secrets the gateway generates once and
every replica reads: the one the per-group ``cache_salt`` is derived from) and ``key_groups.prefix_cache``
(``group``: a group's keys share vLLM's prefix cache among themselves only; ``shared``: with every other
``shared`` group). Every existing group gets ``group``.

Revision ID: 0014
Revises: 0013
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gateway_secrets",
        sa.Column("name", sa.String(40), primary_key=True),
        sa.Column("value", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("key_groups") as batch:
        batch.add_column(sa.Column("prefix_cache", sa.String(8), nullable=False, server_default="group"))


def downgrade() -> None:
    with op.batch_alter_table("key_groups") as batch:
        batch.drop_column("prefix_cache")
    op.drop_table("gateway_secrets")
