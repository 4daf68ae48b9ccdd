"""Key store: API key records in the gateway database (see :mod:`gateway.storage.db`).

A key has a public id (``key_…``), a unique name (what metrics, logs and the ledger show), and a
secret of which only the SHA-256 is stored. Rotation stores a new hash and keeps the previous one
valid until ``previous_expires_at`` (the grace period), so clients can switch without an outage.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, delete, or_, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.auth.groups import GroupRecord, group_row, quota_of
from gateway.auth.principal import RESERVED_NAME_PREFIXES, Principal, Quota
from gateway.auth.secrets import display_prefix, generate_key, hash_key
from gateway.body.json_limits import deeper_than
from gateway.storage.db import open_engine
from gateway.storage.tables import ApiKeyRow, utc

#: How deep key metadata (free-form labels) may nest, and how large it may be as JSON, bytes.
METADATA_DEPTH = 4
METADATA_BYTES = 4096
#: Most model aliases a key may have, and the longest name on either side of one, characters.
ALIASES_MAX = 64
ALIAS_CHARS = 200


def check_name(name: str) -> None:
    """Raise ``ValueError`` for a key name other identities use (:data:`RESERVED_NAME_PREFIXES`)."""
    if name.lower().startswith(RESERVED_NAME_PREFIXES):
        reserved = " or ".join(repr(p) for p in RESERVED_NAME_PREFIXES)
        raise ValueError(f"key names may not start with {reserved}: those name other identities")


def check_aliases(aliases: Mapping[str, str] | None) -> None:
    """Raise ``ValueError`` unless ``aliases`` is None or a map of at most :data:`ALIASES_MAX` model
    names to model names, each a non-empty string of at most :data:`ALIAS_CHARS` characters."""
    if aliases is None:
        return
    if not isinstance(aliases, Mapping) or len(aliases) > ALIASES_MAX:
        raise ValueError(f"aliases must be a map of at most {ALIASES_MAX} model names to model names")
    for name, model in aliases.items():
        if not all(isinstance(s, str) and 0 < len(s) <= ALIAS_CHARS for s in (name, model)):
            raise ValueError(f"an alias and its model must be names of 1 to {ALIAS_CHARS} characters")


def readable(value: Any, max_depth: int) -> Any:
    """``value`` (a stored JSON column) as a listing shows it: itself, or a note in its place when it
    nests deeper than ``max_depth`` (a row written before the bounds must not break a listing)."""
    if deeper_than(value, max_depth):
        return {"unreadable": f"nested more than {max_depth} levels deep"}
    return value


#: Fields an admin may change after creation (PATCH).
MUTABLE_FIELDS = (
    "expires_at",
    "models",
    "rpm",
    "tpm",
    "max_concurrency",
    "priority",
    "default_thinking",
    "metadata",
    "aliases",
    "max_wait_s",
    "request_class",
    "quota_tokens",
    "quota_period",
    "quota_mode",
    "group",
)


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A key's stored state (never its secret). Limits: ``None`` means unlimited. ``aliases``: the key's
    own model names, ``{alias: served model name}`` (None: only the gateway's)."""

    id: str
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    models: tuple[str, ...] | None
    scopes: tuple[str, ...]
    default_thinking: str | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_concurrency: int | None = None
    priority: int = 1
    metadata: Mapping[str, Any] = field(default_factory=dict)
    previous_expires_at: datetime | None = None
    aliases: Mapping[str, str] | None = None
    max_wait_s: float | None = None
    request_class: str | None = None
    quota_tokens: int | None = None
    quota_period: str | None = None
    quota_mode: str | None = None
    group: GroupRecord | None = None

    @classmethod
    def from_row(cls, row: ApiKeyRow) -> KeyRecord:
        created = utc(row.created_at)
        assert created is not None
        return cls(
            id=row.id,
            name=row.name,
            prefix=row.prefix,
            created_at=created,
            expires_at=utc(row.expires_at),
            revoked_at=utc(row.revoked_at),
            last_used_at=utc(row.last_used_at),
            models=tuple(row.models) if row.models is not None else None,
            scopes=tuple(row.scopes or ()),
            default_thinking=row.default_thinking,
            rpm=row.rpm,
            tpm=row.tpm,
            max_concurrency=row.max_concurrency,
            priority=row.priority or 1,
            metadata=dict(row.meta or {}),
            previous_expires_at=utc(row.previous_expires_at),
            aliases=dict(row.aliases) if row.aliases is not None else None,
            max_wait_s=row.max_wait_s,
            request_class=row.request_class,
            quota_tokens=row.quota_tokens,
            quota_period=row.quota_period,
            quota_mode=row.quota_mode,
            group=GroupRecord.from_row(row.group) if row.group is not None else None,
        )

    def status(self, now: datetime) -> str:
        """``active``, ``revoked`` or ``expired`` at ``now``."""
        if self.revoked_at is not None:
            return "revoked"
        if self.expires_at is not None and self.expires_at <= now:
            return "expired"
        return "active"

    def principal(self) -> Principal:
        """The :class:`Principal` this key authenticates as."""
        return Principal(
            key_id=self.id,
            name=self.name,
            models=self.models,
            scopes=self.scopes,
            default_thinking=self.default_thinking,
            rpm=self.rpm,
            tpm=self.tpm,
            max_concurrency=self.max_concurrency,
            priority=self.priority,
            aliases=self.aliases,
            max_wait_s=self.max_wait_s,
            request_class=self.request_class or "interactive",
            quota=self.quota(),
            group=self.group.group() if self.group is not None else None,
        )

    def quota(self) -> Quota | None:
        """The key's own quota (period ``month`` and mode ``enforce`` unless set), or None."""
        return quota_of(f"key:{self.id}", self.quota_tokens, self.quota_period, self.quota_mode)

    def public(self, now: datetime) -> dict[str, Any]:
        """JSON view for the admin API and CLI (no secret, no hash)."""
        iso = lambda v: v.isoformat() if v else None  # noqa: E731
        quota = self.quota()
        return {
            "id": self.id,
            "name": self.name,
            "prefix": self.prefix,
            "status": self.status(now),
            "created_at": iso(self.created_at),
            "expires_at": iso(self.expires_at),
            "revoked_at": iso(self.revoked_at),
            "last_used_at": iso(self.last_used_at),
            "models": list(self.models) if self.models is not None else None,
            "scopes": list(self.scopes),
            "default_thinking": self.default_thinking,
            "rpm": self.rpm,
            "tpm": self.tpm,
            "max_concurrency": self.max_concurrency,
            "priority": self.priority,
            "metadata": readable(dict(self.metadata), METADATA_DEPTH),
            "aliases": dict(self.aliases) if self.aliases is not None else None,
            "max_wait_s": self.max_wait_s,
            "request_class": self.request_class or "interactive",
            "quota_tokens": self.quota_tokens,
            "quota_period": quota.period if quota else None,
            "quota_mode": quota.mode if quota else None,
            "group": self.group.name if self.group is not None else None,
            "previous_key_valid_until": iso(self.previous_expires_at)
            if self.previous_expires_at and self.previous_expires_at > now
            else None,
        }


def _is(ref: str) -> ColumnElement[bool]:
    """The condition selecting the key whose id or name is ``ref``."""
    return or_(ApiKeyRow.id == ref, ApiKeyRow.name == ref)


class KeyExistsError(Exception):
    """A key with this name already exists."""


class KeyNotFoundError(Exception):
    """No key with this name or id."""


class KeyRevokedError(Exception):
    """The key is revoked: it gets no new secret (one would never be accepted)."""


class KeyStore:
    """Async CRUD over API keys. One instance per process; share it, it pools connections."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._session = async_sessionmaker(engine, expire_on_commit=False)

    @classmethod
    async def open(cls, url: str) -> KeyStore:
        """A store on its own engine (CLI use); :meth:`close` disposes of it."""
        return cls(await open_engine(url))

    @property
    def engine(self) -> AsyncEngine:
        """The database it reads and writes (its groups' store shares it)."""
        return self._engine

    async def close(self) -> None:
        """Dispose of the connection pool."""
        await self._engine.dispose()

    async def create(
        self,
        name: str,
        *,
        expires_at: datetime | None = None,
        models: Sequence[str] | None = None,
        scopes: Sequence[str] = (),
        default_thinking: str | None = None,
        rpm: int | None = None,
        tpm: int | None = None,
        max_concurrency: int | None = None,
        priority: int = 1,
        metadata: Mapping[str, Any] | None = None,
        aliases: Mapping[str, str] | None = None,
        max_wait_s: float | None = None,
        request_class: str | None = None,
        quota_tokens: int | None = None,
        quota_period: str | None = None,
        quota_mode: str | None = None,
        group: str | None = None,
        key_hash: str | None = None,
    ) -> tuple[KeyRecord, str | None]:
        """Create a key; return its record and the plaintext secret (the only time it exists).

        ``key_hash`` registers a key whose secret was made elsewhere (bootstrap from
        ``GATEWAY_ADMIN_KEY_SHA256``); the returned secret is then None; ``group``: the id or name of
        its group (:class:`~gateway.auth.groups.GroupNotFoundError`). Raises :class:`KeyExistsError`,
        ``ValueError`` for a reserved name (:func:`check_name`) or malformed aliases (:func:`check_aliases`).
        """
        check_name(name)
        check_aliases(aliases)
        secret = None if key_hash else generate_key()
        row = ApiKeyRow(
            id="key_" + uuid.uuid4().hex[:24],
            name=name,
            key_hash=key_hash or hash_key(secret or ""),
            prefix=display_prefix(secret) if secret else "(sha256)",
            created_at=datetime.now(UTC),
            expires_at=expires_at,
            models=list(models) if models is not None else None,
            scopes=list(scopes),
            default_thinking=default_thinking,
            rpm=rpm,
            tpm=tpm,
            max_concurrency=max_concurrency,
            priority=priority,
            meta=dict(metadata or {}),
            aliases=dict(aliases) if aliases is not None else None,
            max_wait_s=max_wait_s,
            request_class=request_class,
            quota_tokens=quota_tokens,
            quota_period=quota_period,
            quota_mode=quota_mode,
        )
        try:
            async with self._session.begin() as session:
                row.group = await group_row(session, group) if group is not None else None
                session.add(row)
        except IntegrityError as exc:
            raise KeyExistsError(name) from exc
        return KeyRecord.from_row(row), secret

    async def list(self) -> list[KeyRecord]:
        """All keys, oldest first."""
        async with self._session() as session:
            rows = await session.scalars(select(ApiKeyRow).order_by(ApiKeyRow.created_at))
            return [KeyRecord.from_row(r) for r in rows]

    async def get(self, ref: str) -> KeyRecord:
        """The key with id or name ``ref``. Raises :class:`KeyNotFoundError`."""
        async with self._session() as session:
            row = await session.scalar(select(ApiKeyRow).where(_is(ref)))
            if row is None:
                raise KeyNotFoundError(ref)
            return KeyRecord.from_row(row)

    async def find_by_hash(self, key_hash: str, now: datetime | None = None) -> KeyRecord | None:
        """The key whose current secret — or previous one, within its rotation grace — hashes to
        ``key_hash``, or None. Indexed lookups."""
        now = now or datetime.now(UTC)
        async with self._session() as session:
            row = await session.scalar(select(ApiKeyRow).where(ApiKeyRow.key_hash == key_hash))
            if row is not None:
                return KeyRecord.from_row(row)
            row = await session.scalar(select(ApiKeyRow).where(ApiKeyRow.previous_hash == key_hash))
            grace = utc(row.previous_expires_at) if row is not None else None
            if row is None or grace is None or grace <= now:
                return None
            return KeyRecord.from_row(row)

    async def _mutate(
        self, ref: str, change: Callable[[AsyncSession, ApiKeyRow], Awaitable[None]]
    ) -> KeyRecord:
        async with self._session.begin() as session:
            row = await session.scalar(select(ApiKeyRow).where(_is(ref)))
            if row is None:
                raise KeyNotFoundError(ref)
            await change(session, row)
            return KeyRecord.from_row(row)

    async def update(self, ref: str, changes: Mapping[str, Any]) -> KeyRecord:
        """Set fields of :data:`MUTABLE_FIELDS` (others, or malformed aliases: ``ValueError``; ``group``:
        a group's id or name, or None). Raises :class:`KeyNotFoundError`,
        :class:`~gateway.auth.groups.GroupNotFoundError`."""
        unknown = set(changes) - set(MUTABLE_FIELDS)
        if unknown:
            raise ValueError(f"not changeable: {', '.join(sorted(unknown))}")
        check_aliases(changes.get("aliases"))

        defaults = {"priority": 1, "metadata": {}}  # non-null columns: null means "back to default"

        async def apply(session: AsyncSession, row: ApiKeyRow) -> None:
            for name, value in changes.items():
                if name == "group":  # an id or a name: its row, or none
                    row.group = await group_row(session, value) if value is not None else None
                    continue
                setattr(
                    row,
                    "meta" if name == "metadata" else name,
                    defaults.get(name) if value is None else value,
                )

        return await self._mutate(ref, apply)

    async def rotate(self, ref: str, grace: timedelta) -> tuple[KeyRecord, str]:
        """Give the key a new secret; the old one keeps working for ``grace``. Returns the new secret.
        Raises :class:`KeyNotFoundError`, :class:`KeyRevokedError`."""
        secret = generate_key()

        async def apply(session: AsyncSession, row: ApiKeyRow) -> None:
            if row.revoked_at is not None:
                raise KeyRevokedError(ref)
            row.previous_hash = row.key_hash
            row.previous_expires_at = datetime.now(UTC) + grace
            row.key_hash = hash_key(secret)
            row.prefix = display_prefix(secret)

        return await self._mutate(ref, apply), secret

    async def revoke(self, ref: str) -> tuple[KeyRecord, bool]:
        """Mark the key (id or name) revoked: the key and True, or, for one revoked already, the key as
        it is (its ``revoked_at`` kept) and False. One conditional UPDATE: of two revokes at once, one
        is True. Raises :class:`KeyNotFoundError`."""
        async with self._session.begin() as session:
            result = await session.execute(
                update(ApiKeyRow)
                .where(_is(ref), ApiKeyRow.revoked_at.is_(None))
                .values(revoked_at=datetime.now(UTC))
            )
            row = await session.scalar(select(ApiKeyRow).where(_is(ref)))
            if row is None:
                raise KeyNotFoundError(ref)
            return KeyRecord.from_row(row), bool(result.rowcount)  # type: ignore[attr-defined]

    async def delete(self, ref: str) -> None:
        """Remove the key (id or name) for good. Raises :class:`KeyNotFoundError`."""
        async with self._session.begin() as session:
            result = await session.execute(delete(ApiKeyRow).where(_is(ref)))
            if not result.rowcount:  # type: ignore[attr-defined]
                raise KeyNotFoundError(ref)

    async def touch(self, key_id: str, when: datetime) -> None:
        """Record that the key was used at ``when``."""
        async with self._session.begin() as session:
            await session.execute(update(ApiKeyRow).where(ApiKeyRow.id == key_id).values(last_used_at=when))
