"""Uploaded files (the OpenAI Files API): their records in the gateway's database (table ``files``) and
their content in a directory (``GATEWAY_FILES_DIR``) under their id. Replicas that share a database
share the directory too (a volume all of them mount): any of them serves any file.

An upload is written to a temporary file in that directory (``.upload-…``) and renamed to its id once
it is whole, then recorded: no reader sees half a file, and an upload cut short leaves nothing (its
temporary file is removed, a disk that fills up under it included: 507). A file is the key's that
uploaded it: for any other key it does not exist. A key's upload is bounded by what the key, its group
and everyone keep (:mod:`gateway.storage.file_bounds`). A file may expire (``expires_at``): from then
its key no longer sees it (:meth:`FileStore.live`), and the sweep (:mod:`gateway.storage.file_sweep`)
deletes it once no batch that has not ended reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, Literal

from sqlalchemy import and_, delete, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.errors import GatewayError
from gateway.storage.batches import ACTIVE
from gateway.storage.failures import insufficient_storage, no_space, reason
from gateway.storage.file_bounds import FileBounds, Owner, Room, check_free, room
from gateway.storage.tables import BatchRow, FileRow, utc

#: How a file id begins (OpenAI's shape: ``file-`` and random characters).
FILE_ID_PREFIX = "file-"
#: Bytes read at a time from a file's content.
READ_BYTES = 1024 * 1024
#: Bytes an upload writes between two looks at the disk's free space.
CHECK_FREE_BYTES = 8 * 1024 * 1024
#: An upload bounded by nothing but its file's own bound; a store that bounds no key.
UNBOUNDED, NO_BOUNDS = Room(None), FileBounds()
#: Expired files one sweep deletes at most (the next sweep takes the rest).
SWEEP_FILES = 500


@dataclass(frozen=True, slots=True)
class StoredFile:
    """One uploaded file: ``bytes`` of content in ``lines`` lines (the last one with or without its
    newline), ``key_id``'s."""

    id: str
    key_id: str
    filename: str
    purpose: str
    bytes: int
    lines: int
    created_at: datetime
    expires_at: datetime | None = None

    def expired(self, now: datetime) -> bool:
        """True once ``now`` is past its expiry."""
        return self.expires_at is not None and self.expires_at <= now

    def as_openai(self) -> dict[str, Any]:
        """OpenAI's file object (API reference, "The file object"; ``status`` is always ``processed``)."""
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": int(self.created_at.timestamp()),
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": int(self.expires_at.timestamp()) if self.expires_at is not None else None,
            "status_details": None,
        }


class Upload:
    """One upload under way, into ``path`` (open as ``handle``): at most ``max_bytes`` (None: no bound,
    a file the gateway writes) and what its ``room`` leaves, leaving ``min_free_bytes`` free on the
    disk; its bytes and lines counted as they come."""

    def __init__(
        self,
        path: Path,
        handle: IO[bytes],
        max_bytes: int | None,
        room: Room = UNBOUNDED,
        min_free_bytes: int = 0,
    ) -> None:
        self.path = path
        self._handle = handle
        self._max_bytes = max_bytes
        self._room = room
        self._min_free_bytes = min_free_bytes
        self._unchecked = 0
        self.bytes = 0
        self._newlines = 0
        self._ends_with_newline = True

    @property
    def lines(self) -> int:
        """Lines so far; a last line without its newline counts."""
        return self._newlines + (not self._ends_with_newline)

    async def write(self, data: bytes) -> None:
        """Append ``data``. Raises :class:`GatewayError` 413 ``request_too_large`` past ``max_bytes``,
        the room's refusal past it, 507 ``insufficient_storage`` when the disk has no more room."""
        if not data:
            return
        self.bytes += len(data)
        if self._max_bytes is not None and self.bytes > self._max_bytes:
            raise GatewayError("request_too_large", f"The file is larger than {self._max_bytes} bytes.")
        if self._room.bytes is not None and self.bytes > self._room.bytes:
            assert self._room.refusal is not None
            raise self._room.refusal
        self._unchecked += len(data)
        if self._unchecked >= CHECK_FREE_BYTES:
            self._unchecked = 0
            await check_free(self.path.parent, self._min_free_bytes)
        self._newlines += data.count(b"\n")
        self._ends_with_newline = data.endswith(b"\n")
        await _on_disk(self._handle.write, data)

    async def close(self) -> None:
        """Write what is buffered and close (507 when the disk has no room for it)."""
        await _on_disk(self._handle.close)


async def _on_disk(call: Any, *args: Any) -> None:
    """``call(*args)`` off the loop; a disk without room raises 507 ``insufficient_storage``."""
    try:
        await asyncio.to_thread(call, *args)
    except OSError as error:
        if no_space(error):
            raise insufficient_storage(reason(error)) from error
        raise


class FileStore:
    """Files on ``engine`` (records) and in ``directory`` (content), each at most ``max_bytes``, a
    key's uploads within ``bounds``; a file given no lifetime lives ``default_expiry_s`` (None:
    until deleted)."""

    def __init__(
        self,
        engine: AsyncEngine,
        directory: Path,
        max_bytes: int,
        bounds: FileBounds = NO_BOUNDS,
        default_expiry_s: int | None = None,
    ) -> None:
        self._engine = engine
        self.directory = directory
        self.max_bytes = max_bytes
        self.bounds = bounds
        self.default_expiry_s = default_expiry_s
        self._commits = asyncio.Lock()  # a room checked and the file recorded, one upload at a time

    def content(self, stored: StoredFile) -> Path:
        """Where ``stored``'s content is."""
        return self.directory / stored.id

    async def lines(self, stored: StoredFile, max_line_bytes: int) -> AsyncIterator[bytes]:
        """``stored``'s lines, each without its newline, read :data:`READ_BYTES` at a time off the loop;
        a line longer than ``max_line_bytes`` is cut to ``max_line_bytes + 1`` (its reader refuses it)."""
        with await asyncio.to_thread(open, self.content(stored), "rb") as handle:
            line = bytearray()
            while block := await asyncio.to_thread(handle.read, READ_BYTES):
                *ends, tail = block.split(b"\n")
                for piece in ends:
                    line += piece[: max(0, max_line_bytes + 1 - len(line))]
                    yield bytes(line)
                    line.clear()
                line += tail[: max(0, max_line_bytes + 1 - len(line))]
            if line:
                yield bytes(line)

    async def upload(self, bounded: bool = True, owner: Owner | None = None) -> Upload:
        """A new upload: a temporary file in the directory (made if missing), at most ``max_bytes``
        unless not ``bounded`` (a batch's results); ``owner``'s, within the room its bounds leave
        (raises their refusal when there is none, 507 when the disk is below its free bytes)."""
        await asyncio.to_thread(self.directory.mkdir, parents=True, exist_ok=True)
        space, min_free = UNBOUNDED, 0
        if owner is not None:
            min_free = self.bounds.min_free_bytes
            await check_free(self.directory, min_free)
            space = await self._room(owner)

        def open_temporary() -> tuple[Path, IO[bytes]]:
            descriptor, name = tempfile.mkstemp(prefix=".upload-", dir=self.directory)
            return Path(name), os.fdopen(descriptor, "wb")

        try:
            path, handle = await asyncio.to_thread(open_temporary)
        except OSError as error:
            if no_space(error):
                raise insufficient_storage(reason(error)) from error
            raise
        return Upload(path, handle, self.max_bytes if bounded else None, space, min_free)

    async def _room(self, owner: Owner) -> Room:
        async with self._engine.connect() as conn:
            return await room(conn, self.bounds, owner)

    async def sweep(self, older_than_s: float = 86_400) -> int:
        """Remove the temporary files of uploads left by a process that died (kill -9) more than
        ``older_than_s`` ago (a day: another replica's upload under way is never that old); how many."""

        def sweep() -> int:
            if not self.directory.is_dir():
                return 0
            cutoff, gone = time.time() - older_than_s, 0
            for path in self.directory.glob(".upload-*"):
                with contextlib.suppress(FileNotFoundError):
                    if path.stat().st_mtime < cutoff:
                        path.unlink()
                        gone += 1
            return gone

        return await asyncio.to_thread(sweep)

    async def discard(self, upload: Upload) -> None:
        """Give up ``upload``: its temporary file removed (also when closing it fails: a full disk)."""
        try:
            with contextlib.suppress(GatewayError, OSError):
                await upload.close()
        finally:
            await asyncio.to_thread(upload.path.unlink, missing_ok=True)

    async def commit(
        self,
        upload: Upload,
        key_id: str,
        filename: str,
        purpose: str,
        file_id: str | None = None,
        owner: Owner | None = None,
        expires_after_s: int | None = None,
    ) -> StoredFile:
        """``upload``, whole, becomes ``key_id``'s file ``filename``, expiring ``expires_after_s``
        from now (else ``default_expiry_s``): renamed to its id, recorded. A ``file_id`` given (a
        batch's result file, written again after a restart) replaces that file; else the id is new.
        An ``owner``'s upload is checked against its bounds again, with the uploads that finished
        meanwhile (their refusal)."""
        await upload.close()
        if owner is None:
            return await self._record(upload, key_id, filename, purpose, file_id, expires_after_s)
        async with self._commits:
            space = await self._room(owner)
            if space.bytes is not None and upload.bytes > space.bytes:
                assert space.refusal is not None
                raise space.refusal
            return await self._record(upload, key_id, filename, purpose, file_id, expires_after_s)

    async def _record(
        self,
        upload: Upload,
        key_id: str,
        filename: str,
        purpose: str,
        file_id: str | None,
        expires_after_s: int | None,
    ) -> StoredFile:
        now = datetime.now(UTC)
        lifetime = expires_after_s or self.default_expiry_s
        stored = StoredFile(
            file_id or FILE_ID_PREFIX + secrets.token_hex(12),
            key_id,
            filename[:255],
            purpose,
            upload.bytes,
            upload.lines,
            now,
            now + timedelta(seconds=lifetime) if lifetime else None,
        )
        await asyncio.to_thread(os.replace, upload.path, self.content(stored))
        try:
            async with self._engine.begin() as conn:
                if file_id is not None:
                    await conn.execute(delete(FileRow).where(FileRow.id == file_id))
                await conn.execute(
                    insert(FileRow).values(
                        id=stored.id,
                        key_id=key_id,
                        filename=stored.filename,
                        purpose=purpose,
                        bytes=stored.bytes,
                        lines=stored.lines,
                        created_at=stored.created_at,
                        expires_at=stored.expires_at,
                    )
                )
        except BaseException:
            if file_id is None:  # a file written again keeps what its first writing recorded
                await asyncio.to_thread(self.content(stored).unlink, missing_ok=True)
            raise
        return stored

    async def get(self, key_id: str, file_id: str) -> StoredFile | None:
        """``key_id``'s file ``file_id``, or None (no such file, or another key's)."""
        async with self._engine.connect() as conn:
            row = (
                await conn.execute(select(FileRow).where(FileRow.id == file_id, FileRow.key_id == key_id))
            ).first()
        return _stored(row) if row is not None else None

    async def live(self, key_id: str, file_id: str) -> StoredFile | None:
        """``key_id``'s file ``file_id`` as its key sees it: None once it expired too."""
        stored = await self.get(key_id, file_id)
        return stored if stored is not None and not stored.expired(datetime.now(UTC)) else None

    async def page(
        self,
        key_id: str,
        purpose: str | None,
        after: StoredFile | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> tuple[list[StoredFile], bool]:
        """``key_id``'s files (of ``purpose``), ``limit`` of them from just past ``after`` in ``order``
        of creation, expired files left out; and whether more follow."""
        expiry = FileRow.expires_at
        query = select(FileRow).where(
            FileRow.key_id == key_id, or_(expiry.is_(None), expiry > datetime.now(UTC))
        )
        if purpose is not None:
            query = query.where(FileRow.purpose == purpose)
        newest_first = order == "desc"
        if after is not None:
            at, ident = FileRow.created_at, FileRow.id
            past = (
                or_(at < after.created_at, and_(at == after.created_at, ident < after.id))
                if newest_first
                else or_(at > after.created_at, and_(at == after.created_at, ident > after.id))
            )
            query = query.where(past)
        columns = (FileRow.created_at, FileRow.id)
        query = query.order_by(*(c.desc() for c in columns) if newest_first else columns).limit(limit + 1)
        async with self._engine.connect() as conn:
            rows = (await conn.execute(query)).all()
        return [_stored(row) for row in rows[:limit]], len(rows) > limit

    async def recent(self, limit: int, key_id: str | None = None) -> list[StoredFile]:
        """The newest ``limit`` files (of ``key_id``), newest first: an operator's view."""
        query = select(FileRow)
        if key_id is not None:
            query = query.where(FileRow.key_id == key_id)
        query = query.order_by(FileRow.created_at.desc(), FileRow.id.desc()).limit(limit)
        async with self._engine.connect() as conn:
            return [_stored(row) for row in (await conn.execute(query)).all()]

    async def find(self, file_id: str) -> StoredFile | None:
        """File ``file_id``, whoever's it is (an operator's view), or None."""
        async with self._engine.connect() as conn:
            row = (await conn.execute(select(FileRow).where(FileRow.id == file_id))).first()
        return _stored(row) if row is not None else None

    async def delete(self, key_id: str, file_id: str) -> bool:
        """Delete ``key_id``'s file ``file_id``: its record, then its content. False if there was none."""
        async with self._engine.begin() as conn:
            result = await conn.execute(
                delete(FileRow).where(FileRow.id == file_id, FileRow.key_id == key_id)
            )
        if not result.rowcount:
            return False
        await asyncio.to_thread((self.directory / file_id).unlink, missing_ok=True)
        return True

    async def remove_expired(self) -> int:
        """Delete up to :data:`SWEEP_FILES` expired files (records, then content), except those a
        batch that has not ended reads (its input: it is deleted once the batch ends); how many."""
        now = datetime.now(UTC)
        read = select(BatchRow.input_file_id).where(BatchRow.status.in_(ACTIVE))
        expired = and_(FileRow.expires_at <= now, FileRow.id.not_in(read))
        async with self._engine.begin() as conn:
            ids = list((await conn.execute(select(FileRow.id).where(expired).limit(SWEEP_FILES))).scalars())
            if ids:
                await conn.execute(delete(FileRow).where(FileRow.id.in_(ids), expired))

        def unlink() -> None:
            for file_id in ids:
                (self.directory / file_id).unlink(missing_ok=True)

        await asyncio.to_thread(unlink)
        return len(ids)


def _stored(row: Any) -> StoredFile:
    created = utc(row.created_at)
    assert created is not None
    return StoredFile(
        row.id, row.key_id, row.filename, row.purpose, row.bytes, row.lines, created, utc(row.expires_at)
    )
