"""The schema of release 0.1.0 as its last unversioned shape (:mod:`gateway.storage.migrations.unversioned`).

A 0.1.0 database was made by ``create_all`` and has no ``alembic_version``: ``dspark-gateway db upgrade``
aligns an older shape with :func:`schema`, then stamps it with this revision.

Revision ID: 0001
Revises: none
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import MetaData

from gateway.storage.migrations import unversioned

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def schema() -> MetaData:
    """The four tables of 0.1.0, in a metadata of their own (nothing here follows later revisions)."""
    return unversioned.shape(-1)


def upgrade() -> None:
    schema().create_all(op.get_bind(), checkfirst=False)


def downgrade() -> None:
    schema().drop_all(op.get_bind(), checkfirst=False)
