"""How much an upload may still write: the bounds on what keys keep in the files directory
(``GATEWAY_FILES_MAX_{BYTES,COUNT}_PER_{KEY,GROUP}``, ``GATEWAY_FILES_MAX_TOTAL_BYTES``) and the free
space it must leave on the disk (``GATEWAY_FILES_MIN_FREE_BYTES``).

A key's or a group's bound passed is OpenAI's answer to a full file storage quota: 400
``storage_quota_exceeded``; the gateway's own bounds (all files, the disk) are 507
``insufficient_storage``. A key's and a group's files are those not expired (an expired file is gone
for its key, whether or not the sweep has deleted it yet); a group's are its keys' files as the keys
are grouped now. The checks read the database: exact within a process (its commits are one at a
time, :class:`~gateway.storage.files.FileStore`), and across replicas up to the uploads that commit
at the same moment.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import func, or_, select
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.sql import ColumnElement

from gateway.errors import GatewayError
from gateway.storage.failures import insufficient_storage
from gateway.storage.tables import ApiKeyRow, FileRow


@dataclass(frozen=True, slots=True)
class FileBounds:
    """Bytes and counts of files a key, the keys of a group and everyone may keep (None: no bound),
    and the free bytes the disk keeps."""

    key_bytes: int | None = None
    key_count: int | None = None
    group_bytes: int | None = None
    group_count: int | None = None
    total_bytes: int | None = None
    min_free_bytes: int = 0


@dataclass(frozen=True, slots=True)
class Owner:
    """Whose upload it is: key ``key_id``, in group ``group_id`` (None: in none)."""

    key_id: str
    group_id: str | None = None


@dataclass(frozen=True, slots=True)
class Room:
    """An upload may write ``bytes`` more (None: no bound but the file's own); past them, ``refusal``."""

    bytes: int | None
    refusal: GatewayError | None = None


def _quota(whose: str, bound: str, kept: int) -> GatewayError:
    message = (
        f"You have exceeded your file storage quota: {whose} may keep {bound} ({kept} kept). "
        "Delete old files or upload a smaller one."
    )
    return GatewayError("storage_quota_exceeded", message)


async def room(conn: AsyncConnection, bounds: FileBounds, owner: Owner) -> Room:
    """What ``owner``'s next file may take: raises the refusal of a count that is full or bytes that
    are all used; else the fewest bytes any bound leaves, with the refusal of passing it."""
    now = datetime.now(UTC)
    live = or_(FileRow.expires_at.is_(None), FileRow.expires_at > now)
    usage = select(func.count(), func.coalesce(func.sum(FileRow.bytes), 0))
    left: list[tuple[int, GatewayError]] = []

    async def bound(
        where: ColumnElement[bool], whose: str, max_bytes: int | None, max_count: int | None
    ) -> None:
        count, used = (await conn.execute(usage.where(where, live))).one()
        if max_count is not None and count >= max_count:
            raise _quota(whose, f"{max_count} files", count)
        if max_bytes is not None:
            error = _quota(whose, f"{max_bytes} bytes of files", used)
            if used >= max_bytes:
                raise error
            left.append((max_bytes - used, error))

    if bounds.key_bytes is not None or bounds.key_count is not None:
        await bound(FileRow.key_id == owner.key_id, "this key", bounds.key_bytes, bounds.key_count)
    if owner.group_id is not None and (bounds.group_bytes is not None or bounds.group_count is not None):
        keys = select(ApiKeyRow.id).where(ApiKeyRow.group_id == owner.group_id)
        await bound(FileRow.key_id.in_(keys), "this key's group", bounds.group_bytes, bounds.group_count)
    if bounds.total_bytes is not None:
        used = int((await conn.execute(select(func.coalesce(func.sum(FileRow.bytes), 0)))).scalar_one())
        error = insufficient_storage(f"the files of every key may take {bounds.total_bytes} bytes")
        if used >= bounds.total_bytes:
            raise error
        left.append((bounds.total_bytes - used, error))
    if not left:
        return Room(None)
    fewest = min(left, key=lambda pair: pair[0])
    return Room(fewest[0], fewest[1])


async def check_free(directory: Path, min_free_bytes: int) -> None:
    """Raises 507 ``insufficient_storage`` when the disk of ``directory`` has less than
    ``min_free_bytes`` free (for an unprivileged process: ``statvfs``'s available blocks)."""
    if min_free_bytes <= 0:
        return
    stats = await asyncio.to_thread(os.statvfs, directory)
    free = stats.f_bavail * stats.f_frsize
    if free < min_free_bytes:
        raise insufficient_storage(f"the files' disk has {free} bytes free, less than {min_free_bytes}")
