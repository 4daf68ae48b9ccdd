"""Groups of keys (a team): what their keys share — requests and tokens per minute, a token quota —
in the gateway database, beside the keys (see :mod:`gateway.auth.store`).

A group has a public id (``grp_…``) and a unique name (what the ledger, the audit trail and listings
show). A key belongs to at most one group; a group with keys can't be deleted (move or delete them
first), so no key is left pointing nowhere.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from gateway.auth.principal import RESERVED_NAME_PREFIXES, Group, Quota
from gateway.storage.tables import ApiKeyRow, KeyGroupRow, utc

#: Fields of a group an admin may set (at creation, or later: PATCH).
GROUP_FIELDS = ("rpm", "tpm", "quota_tokens", "quota_period", "quota_mode", "metadata", "prefix_cache")
#: How every group's id starts (then 24 hex digits).
ID_PREFIX = "grp_"


def check_group_name(name: str) -> None:
    """Raise ``ValueError`` for a group name that would say two things: one shaped as a group's id (a
    key's ``group`` names its group by id or name) or one other identities' names start with (the
    ledger and reports show both; :data:`~gateway.auth.store.RESERVED_NAME_PREFIXES`)."""
    if name.lower().startswith((ID_PREFIX, *RESERVED_NAME_PREFIXES)):
        reserved = " or ".join(repr(p) for p in (ID_PREFIX, *RESERVED_NAME_PREFIXES))
        raise ValueError(f"group names may not start with {reserved}: those name ids or other identities")


class GroupExistsError(Exception):
    """A group with this name already exists."""


class GroupNotFoundError(Exception):
    """No group with this name or id."""


class GroupInUseError(Exception):
    """The group still has keys."""


def quota_of(holder: str, tokens: int | None, period: str | None, mode: str | None) -> Quota | None:
    """A quota of ``tokens`` (None: no quota), period ``month`` and mode ``enforce`` unless set."""
    return None if tokens is None else Quota(holder, tokens, period or "month", mode or "enforce")


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """A group's stored state."""

    id: str
    name: str
    created_at: datetime
    rpm: int | None = None
    tpm: int | None = None
    quota_tokens: int | None = None
    quota_period: str | None = None
    quota_mode: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    prefix_cache: str = "group"

    @classmethod
    def from_row(cls, row: KeyGroupRow) -> GroupRecord:
        created = utc(row.created_at)
        assert created is not None
        return cls(
            id=row.id,
            name=row.name,
            created_at=created,
            rpm=row.rpm,
            tpm=row.tpm,
            quota_tokens=row.quota_tokens,
            quota_period=row.quota_period,
            quota_mode=row.quota_mode,
            metadata=dict(row.meta or {}),
            prefix_cache=row.prefix_cache or "group",
        )

    def quota(self) -> Quota | None:
        return quota_of(f"group:{self.id}", self.quota_tokens, self.quota_period, self.quota_mode)

    def group(self) -> Group:
        """What its keys' principals carry."""
        return Group(self.id, self.name, self.rpm, self.tpm, self.quota(), self.prefix_cache)

    def public(self, keys: int | None = None) -> dict[str, Any]:
        """JSON view for the admin API and CLI; ``keys``: how many keys it has, when counted."""
        quota = self.quota()
        view: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "created_at": self.created_at.isoformat(),
            "rpm": self.rpm,
            "tpm": self.tpm,
            "quota_tokens": self.quota_tokens,
            "quota_period": quota.period if quota else None,
            "quota_mode": quota.mode if quota else None,
            "metadata": dict(self.metadata),
            "prefix_cache": self.prefix_cache,
        }
        if keys is not None:
            view["keys"] = keys
        return view


def _is(ref: str) -> ColumnElement[bool]:
    return or_(KeyGroupRow.id == ref, KeyGroupRow.name == ref)


async def group_row(session: AsyncSession, ref: str) -> KeyGroupRow:
    """The group with id or name ``ref`` in ``session``; :class:`GroupNotFoundError` otherwise."""
    row = await session.scalar(select(KeyGroupRow).where(_is(ref)))
    if row is None:
        raise GroupNotFoundError(ref)
    return row


class GroupStore:
    """Async CRUD over groups. One instance per process; share it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self._session = async_sessionmaker(engine, expire_on_commit=False)

    async def create(self, name: str, fields: Mapping[str, Any]) -> GroupRecord:
        """A new group with ``fields`` (of :data:`GROUP_FIELDS`). Raises :class:`GroupExistsError`."""
        group_id = ID_PREFIX + uuid.uuid4().hex[:24]
        row = KeyGroupRow(id=group_id, name=name, created_at=datetime.now(UTC), meta={})
        _apply(row, fields)
        try:
            async with self._session.begin() as session:
                session.add(row)
        except IntegrityError as exc:
            raise GroupExistsError(name) from exc
        return GroupRecord.from_row(row)

    async def list(self) -> list[tuple[GroupRecord, int]]:
        """Every group, by name, with its number of keys."""
        members = (
            select(ApiKeyRow.group_id, func.count().label("keys")).group_by(ApiKeyRow.group_id).subquery()
        )
        query = (
            select(KeyGroupRow, func.coalesce(members.c["keys"], 0))
            .outerjoin(members, members.c.group_id == KeyGroupRow.id)
            .order_by(KeyGroupRow.name)
        )
        async with self._session() as session:
            return [
                (GroupRecord.from_row(row), int(keys)) for row, keys in (await session.execute(query)).all()
            ]

    async def get(self, ref: str) -> GroupRecord:
        """The group with id or name ``ref``. Raises :class:`GroupNotFoundError`."""
        async with self._session() as session:
            return GroupRecord.from_row(await group_row(session, ref))

    async def update(self, ref: str, changes: Mapping[str, Any]) -> GroupRecord:
        """Set fields of :data:`GROUP_FIELDS` (null: none / default)."""
        async with self._session.begin() as session:
            row = await group_row(session, ref)
            _apply(row, changes)
            return GroupRecord.from_row(row)

    async def delete(self, ref: str) -> GroupRecord:
        """Remove a group that has no keys. Raises :class:`GroupNotFoundError`, :class:`GroupInUseError`."""
        async with self._session.begin() as session:
            row = await group_row(session, ref)
            if await session.scalar(select(func.count()).where(ApiKeyRow.group_id == row.id)):
                raise GroupInUseError(row.name)
            await session.delete(row)
            return GroupRecord.from_row(row)


def _apply(row: KeyGroupRow, fields: Mapping[str, Any]) -> None:
    unknown = set(fields) - set(GROUP_FIELDS)
    if unknown:
        raise ValueError(f"not a group field: {', '.join(sorted(unknown))}")
    for name, value in fields.items():
        if name == "metadata":
            row.meta = dict(value or {})
        elif name == "prefix_cache":
            row.prefix_cache = value or "group"
        else:
            setattr(row, name, value)
