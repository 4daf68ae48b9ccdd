"""Key store: API key records in the gateway database (see :mod:`gateway.db`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import JSON, DateTime, String, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker
from sqlalchemy.orm import Mapped, mapped_column

from gateway.auth.principal import Principal
from gateway.auth.secrets import display_prefix, generate_key, hash_key
from gateway.db import Base, open_engine, utc


class ApiKeyRow(Base):
    """One API key. ``key_hash`` is SHA-256 hex of the secret; the secret itself is never stored."""

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


@dataclass(frozen=True, slots=True)
class KeyRecord:
    """A key's stored state (never its secret)."""

    id: str
    name: str
    prefix: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None
    models: tuple[str, ...] | None
    scopes: tuple[str, ...]
    default_thinking: str | None

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
        )


class KeyExistsError(Exception):
    """A key with this name already exists."""


class KeyNotFoundError(Exception):
    """No key with this name or id."""


class KeyStore:
    """Async CRUD over API keys. One instance per process; share it, it pools connections."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._session = async_sessionmaker(engine, expire_on_commit=False)

    @classmethod
    async def open(cls, url: str) -> KeyStore:
        """A store on its own engine (CLI use); :meth:`close` disposes of it."""
        return cls(await open_engine(url))

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
    ) -> tuple[KeyRecord, str]:
        """Create a key; return its record and the plaintext secret (the only time it exists).

        Raises :class:`KeyExistsError` if ``name`` is taken.
        """
        secret = generate_key()
        row = ApiKeyRow(
            id="key_" + uuid.uuid4().hex[:24],
            name=name,
            key_hash=hash_key(secret),
            prefix=display_prefix(secret),
            created_at=datetime.now(UTC),
            expires_at=expires_at,
            models=list(models) if models is not None else None,
            scopes=list(scopes),
            default_thinking=default_thinking,
        )
        try:
            async with self._session.begin() as session:
                session.add(row)
        except IntegrityError as exc:
            raise KeyExistsError(name) from exc
        return KeyRecord.from_row(row), secret

    async def list(self) -> list[KeyRecord]:
        """All keys, oldest first."""
        async with self._session() as session:
            rows = await session.scalars(select(ApiKeyRow).order_by(ApiKeyRow.created_at))
            return [KeyRecord.from_row(r) for r in rows]

    async def find_by_hash(self, key_hash: str) -> KeyRecord | None:
        """The key whose secret hashes to ``key_hash``, or None. Indexed lookup."""
        async with self._session() as session:
            row = await session.scalar(select(ApiKeyRow).where(ApiKeyRow.key_hash == key_hash))
            return KeyRecord.from_row(row) if row is not None else None

    async def revoke(self, name: str) -> KeyRecord:
        """Mark the key named ``name`` revoked (idempotent). Raises :class:`KeyNotFoundError`."""
        async with self._session.begin() as session:
            row = await session.scalar(select(ApiKeyRow).where(ApiKeyRow.name == name))
            if row is None:
                raise KeyNotFoundError(name)
            if row.revoked_at is None:
                row.revoked_at = datetime.now(UTC)
            return KeyRecord.from_row(row)

    async def touch(self, key_id: str, when: datetime) -> None:
        """Record that the key was used at ``when``."""
        async with self._session.begin() as session:
            await session.execute(update(ApiKeyRow).where(ApiKeyRow.id == key_id).values(last_used_at=when))
