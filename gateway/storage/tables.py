"""The gateway's tables: API keys and their groups, the audit trail, the usage ledger, stored
responses' owners, uploaded files and batches, on one declarative base.

Read and written by :mod:`gateway.auth.store`, :mod:`gateway.auth.audit` and
:mod:`gateway.telemetry.ledger`. This is the schema at the newest migration
(:mod:`gateway.storage.migrations`, which creates and upgrades it; a test checks that the two
agree): a change here needs a revision there. Times are stored timezone-aware (UTC).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, DateTime, Float, ForeignKey, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    """Declarative base of every gateway table."""


def utc(value: datetime | None) -> datetime | None:
    """SQLite returns naive datetimes: read them back as the UTC they were written in."""
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)


class KeyGroupRow(Base):
    """A group of keys (a team): limits and a quota its keys share (:mod:`gateway.auth.groups`)."""

    __tablename__ = "key_groups"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    rpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    quota_tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    quota_period: Mapped[str | None] = mapped_column(String(8), nullable=True)
    quota_mode: Mapped[str | None] = mapped_column(String(8), nullable=True)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    prefix_cache: Mapped[str] = mapped_column(String(8), default="group", server_default="group")
    """``group``: its keys' prompts share vLLM's prefix cache among themselves only; ``shared``: with
    every other ``shared`` group (:mod:`gateway.auth.cache_salt`)."""


class ApiKeyRow(Base):
    """One API key. ``key_hash`` is SHA-256 hex of the secret; the secret itself is never stored.
    ``aliases``: the key's own model names, ``{alias: served model name}`` (None: none). ``quota_*``:
    its token quota (:mod:`gateway.limits.quota`; None: none)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    key_hash: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    prefix: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    models: Mapped[list[str] | None] = mapped_column(JSON, nullable=True)
    scopes: Mapped[list[str]] = mapped_column(JSON, default=list)
    default_thinking: Mapped[str | None] = mapped_column(String(8), nullable=True)
    rpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    tpm: Mapped[int | None] = mapped_column(Integer, nullable=True)
    max_concurrency: Mapped[int | None] = mapped_column(Integer, nullable=True)
    priority: Mapped[int] = mapped_column(Integer, default=1)
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", JSON, default=dict)
    previous_hash: Mapped[str | None] = mapped_column(String(64), nullable=True, index=True)
    previous_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    aliases: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)
    max_wait_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    request_class: Mapped[str | None] = mapped_column(String(16), nullable=True)
    quota_tokens: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    quota_period: Mapped[str | None] = mapped_column(String(8), nullable=True)
    quota_mode: Mapped[str | None] = mapped_column(String(8), nullable=True)
    group_id: Mapped[str | None] = mapped_column(
        String(40), ForeignKey("key_groups.id", name="fk_api_keys_group_id"), nullable=True, index=True
    )
    #: Loaded with the key, in the same SELECT: a key's principal needs its group's limits.
    group: Mapped[KeyGroupRow | None] = relationship(lazy="joined")


class AuditRow(Base):
    """One admin action. ``detail`` never holds a secret (new keys are not logged, only their prefix)."""

    __tablename__ = "audit_log"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    actor: Mapped[str] = mapped_column(String(200))
    action: Mapped[str] = mapped_column(String(64))
    target: Mapped[str | None] = mapped_column(String(200), nullable=True)
    client: Mapped[str | None] = mapped_column(String(100), nullable=True)
    detail: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)


class UsageRow(Base):
    """One request's usage and telemetry."""

    __tablename__ = "usage_ledger"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    request_id: Mapped[str] = mapped_column(String(128), index=True)
    key_id: Mapped[str] = mapped_column(String(40), index=True)
    key_name: Mapped[str] = mapped_column(String(200))
    model: Mapped[str] = mapped_column(String(200))
    route: Mapped[str] = mapped_column(String(64), index=True)
    stream: Mapped[bool] = mapped_column(Boolean)
    arrived_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    status: Mapped[int] = mapped_column(Integer)
    finish_reason: Mapped[str | None] = mapped_column(String(32), nullable=True)
    client_disconnected: Mapped[bool] = mapped_column(Boolean)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    cached_tokens: Mapped[int] = mapped_column(Integer)
    reasoning_tokens: Mapped[int] = mapped_column(Integer)
    queue_wait_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    ttft_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    upstream_ttft_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    decode_tokens_per_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    e2e_s: Mapped[float | None] = mapped_column(Float, nullable=True)
    waited_for: Mapped[dict[str, float] | None] = mapped_column(JSON, nullable=True)
    prompt_size_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    prompt_size_source: Mapped[str | None] = mapped_column(String(16), nullable=True)
    kv_tokens: Mapped[int | None] = mapped_column(Integer, nullable=True)
    lane: Mapped[str | None] = mapped_column(String(8), nullable=True)
    end_reason: Mapped[str | None] = mapped_column(String(16), nullable=True)
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    spec_candidates: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    group_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    group_name: Mapped[str | None] = mapped_column(String(200), nullable=True)
    client_request_id: Mapped[str | None] = mapped_column(String(128), nullable=True, index=True)
    request_class: Mapped[str | None] = mapped_column(String(16), nullable=True)
    cached_tokens_predicted: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cache_source: Mapped[str | None] = mapped_column(String(16), nullable=True)
    session: Mapped[str | None] = mapped_column(String(16), nullable=True)
    batch_id: Mapped[str | None] = mapped_column(String(40), nullable=True, index=True)
    trace_id: Mapped[str | None] = mapped_column(String(32), nullable=True)


class ResponseOwnerRow(Base):
    """Which key created a response the backend stores (the Responses API's ``store``): only that key
    may read, continue (``previous_response_id``), cancel or delete it. No response content."""

    __tablename__ = "response_owners"

    response_id: Mapped[str] = mapped_column(String(128), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(40), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    backend: Mapped[str | None] = mapped_column(String(64), nullable=True)


class FileRow(Base):
    """A file a key uploaded (the OpenAI Files API, ``purpose`` ``batch``): its name, size in bytes and
    lines, and when; its content is in the files directory under its ``id``
    (:mod:`gateway.storage.files`). Only that key may read or delete it."""

    __tablename__ = "files"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(40), index=True)
    filename: Mapped[str] = mapped_column(String(255))
    purpose: Mapped[str] = mapped_column(String(32))
    bytes: Mapped[int] = mapped_column(BigInteger)
    lines: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    #: When it expires (deleted by the sweep, unseen by its key from then); None: never.
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True, index=True)


class BatchRow(Base):
    """A batch (the OpenAI Batch API): ``key_id``'s lines of ``input_file_id`` for ``endpoint``, its
    status and times as OpenAI's, its request counts and result files; and who runs it: ``holder``
    (a gateway process) until ``lease_until``, under ``fence`` (raised at every claim: a result written
    under an older fence is refused, :mod:`gateway.storage.batches`)."""

    __tablename__ = "batches"

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    key_id: Mapped[str] = mapped_column(String(40), index=True)
    endpoint: Mapped[str] = mapped_column(String(64))
    input_file_id: Mapped[str] = mapped_column(String(40))
    completion_window: Mapped[str] = mapped_column(String(16))
    status: Mapped[str] = mapped_column(String(16), index=True)
    metadata_: Mapped[dict[str, str] | None] = mapped_column("metadata", JSON, nullable=True)
    errors: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    total: Mapped[int] = mapped_column(Integer, default=0)
    completed: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)
    output_file_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    error_file_id: Mapped[str | None] = mapped_column(String(40), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    in_progress_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finalizing_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    failed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    expired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    cancelling_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    cancelled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    holder: Mapped[str | None] = mapped_column(String(64), nullable=True)
    lease_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    fence: Mapped[int] = mapped_column(BigInteger, default=0)


class BatchLineRow(Base):
    """One answered line of a batch: its 0-based ``line`` of the input file, ``custom_id``, ``ok``
    (a 2xx answer: the output file; else the error file) and ``result``, the result file's JSON line.
    Written once per line (the primary key), under the batch's current fence."""

    __tablename__ = "batch_lines"

    batch_id: Mapped[str] = mapped_column(String(40), primary_key=True)
    line: Mapped[int] = mapped_column(Integer, primary_key=True)
    custom_id: Mapped[str] = mapped_column(String(512))
    ok: Mapped[bool] = mapped_column(Boolean)
    result: Mapped[str] = mapped_column(Text)


class GatewaySecretRow(Base):
    """A secret the gateway generated once for every replica to read (:mod:`gateway.storage.secrets`):
    ``name`` (e.g. ``cache_salt``), ``value`` (hex)."""

    __tablename__ = "gateway_secrets"

    name: Mapped[str] = mapped_column(String(40), primary_key=True)
    value: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
