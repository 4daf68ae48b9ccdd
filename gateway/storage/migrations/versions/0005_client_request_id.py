"""The ``x-request-id`` a client sent, in the usage ledger (``client_request_id``, indexed: an admin
looks a client's request up by it). The ledger's ``request_id`` is the gateway's own since; rows
written before keep theirs (then perhaps the client's) and have none here.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Column, String

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        batch.add_column(Column("client_request_id", String(128), nullable=True))
        batch.create_index("ix_usage_ledger_client_request_id", ["client_request_id"])


def downgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        batch.drop_index("ix_usage_ledger_client_request_id")
        batch.drop_column("client_request_id")
