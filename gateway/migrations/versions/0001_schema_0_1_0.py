"""The schema of release 0.1.0, as its ``gateway/tables.py`` defined it (indexes and uniques included).

A 0.1.0 database was made by ``create_all`` and has no ``alembic_version``: ``dspark-gateway db upgrade``
stamps it with this revision when its tables are exactly :func:`schema` (Alembic's ``compare_metadata``).

Revision ID: 0001
Revises: none
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import JSON, Boolean, Column, DateTime, Float, Integer, MetaData, String, Table

revision = "0001"
down_revision: str | None = None
branch_labels = None
depends_on = None


def schema() -> MetaData:
    """The four tables of 0.1.0, in a metadata of their own (nothing here follows later revisions)."""
    metadata = MetaData()
    Table(
        "api_keys",
        metadata,
        Column("id", String(40), primary_key=True),
        Column("name", String(200), nullable=False, unique=True),
        Column("key_hash", String(64), nullable=False, unique=True, index=True),
        Column("prefix", String(32), nullable=False),
        Column("created_at", DateTime(timezone=True), nullable=False),
        Column("expires_at", DateTime(timezone=True), nullable=True),
        Column("revoked_at", DateTime(timezone=True), nullable=True),
        Column("last_used_at", DateTime(timezone=True), nullable=True),
        Column("models", JSON, nullable=True),
        Column("scopes", JSON, nullable=False),
        Column("default_thinking", String(8), nullable=True),
        Column("rpm", Integer, nullable=True),
        Column("tpm", Integer, nullable=True),
        Column("max_concurrency", Integer, nullable=True),
        Column("priority", Integer, nullable=False),
        Column("metadata", JSON, nullable=False),
        Column("previous_hash", String(64), nullable=True, index=True),
        Column("previous_expires_at", DateTime(timezone=True), nullable=True),
    )
    Table(
        "audit_log",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("at", DateTime(timezone=True), nullable=False, index=True),
        Column("actor", String(200), nullable=False),
        Column("action", String(64), nullable=False),
        Column("target", String(200), nullable=True),
        Column("client", String(100), nullable=True),
        Column("detail", JSON, nullable=False),
    )
    Table(
        "usage_ledger",
        metadata,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("request_id", String(128), nullable=False, index=True),
        Column("key_id", String(40), nullable=False, index=True),
        Column("key_name", String(200), nullable=False),
        Column("model", String(200), nullable=False),
        Column("route", String(64), nullable=False),
        Column("stream", Boolean, nullable=False),
        Column("arrived_at", DateTime(timezone=True), nullable=False, index=True),
        Column("status", Integer, nullable=False),
        Column("finish_reason", String(32), nullable=True),
        Column("client_disconnected", Boolean, nullable=False),
        Column("prompt_tokens", Integer, nullable=False),
        Column("completion_tokens", Integer, nullable=False),
        Column("cached_tokens", Integer, nullable=False),
        Column("reasoning_tokens", Integer, nullable=False),
        Column("queue_wait_s", Float, nullable=True),
        Column("ttft_s", Float, nullable=True),
        Column("upstream_ttft_s", Float, nullable=True),
        Column("decode_tokens_per_s", Float, nullable=True),
        Column("e2e_s", Float, nullable=True),
        Column("spec", JSON, nullable=True),
        Column("spec_candidates", JSON, nullable=False),
    )
    Table(
        "response_owners",
        metadata,
        Column("response_id", String(128), primary_key=True),
        Column("key_id", String(40), nullable=False, index=True),
        Column("created_at", DateTime(timezone=True), nullable=False),
    )
    return metadata


def upgrade() -> None:
    schema().create_all(op.get_bind(), checkfirst=False)


def downgrade() -> None:
    schema().drop_all(op.get_bind(), checkfirst=False)
