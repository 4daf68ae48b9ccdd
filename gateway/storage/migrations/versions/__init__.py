"""Alembic revisions, one file each, applied in the order of their ``down_revision`` chain."""
