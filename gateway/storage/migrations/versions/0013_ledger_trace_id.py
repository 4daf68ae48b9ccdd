"""The W3C trace id of a usage row's request (``usage_ledger.trace_id``: its span's when tracing is on,
else the one the client's ``traceparent`` named), so a request in the console's log can be found in
the tracing backend; rows written before, and requests sent without one, have none. And an index on
``usage_ledger.route``: the request log filters by it and lists the routes seen.

Revision ID: 0013
Revises: 0012
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import Column, String

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("usage_ledger") as batch:
        batch.add_column(Column("trace_id", String(32), nullable=True))
    op.create_index("ix_usage_ledger_route", "usage_ledger", ["route"])


def downgrade() -> None:
    op.drop_index("ix_usage_ledger_route", "usage_ledger")
    with op.batch_alter_table("usage_ledger") as batch:
        batch.drop_column("trace_id")
