"""Uploaded files (the OpenAI Files API): their records in the gateway's database (table ``files``) and
their content in a directory (``GATEWAY_FILES_DIR``) under their id. Replicas that share a database
share the directory too (a volume all of them mount): any of them serves any file.

An upload is written to a temporary file in that directory (``.upload-…``) and renamed to its id once
it is whole, then recorded: no reader sees half a file, and an upload cut short leaves nothing (its
temporary file is removed). A file is the key's that uploaded it: for any other key it does not exist.
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
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from sqlalchemy import and_, delete, insert, or_, select
from sqlalchemy.ext.asyncio import AsyncEngine

from gateway.errors import GatewayError
from gateway.storage.tables import FileRow, utc

#: How a file id begins (OpenAI's shape: ``file-`` and random characters).
FILE_ID_PREFIX = "file-"
#: Bytes read at a time from a file's content.
READ_BYTES = 1024 * 1024


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
            "expires_at": None,
            "status_details": None,
        }


class Upload:
    """One upload under way, into ``path`` (open as ``handle``): at most ``max_bytes`` (None: no bound,
    a file the gateway writes), its bytes and lines counted as they come."""

    def __init__(self, path: Path, handle: IO[bytes], max_bytes: int | None) -> None:
        self.path = path
        self._handle = handle
        self._max_bytes = max_bytes
        self.bytes = 0
        self._newlines = 0
        self._ends_with_newline = True

    @property
    def lines(self) -> int:
        """Lines so far; a last line without its newline counts."""
        return self._newlines + (not self._ends_with_newline)

    async def write(self, data: bytes) -> None:
        """Append ``data``. Raises :class:`GatewayError` 413 ``request_too_large`` past ``max_bytes``."""
        if not data:
            return
        self.bytes += len(data)
        if self._max_bytes is not None and self.bytes > self._max_bytes:
            raise GatewayError("request_too_large", f"The file is larger than {self._max_bytes} bytes.")
        self._newlines += data.count(b"\n")
        self._ends_with_newline = data.endswith(b"\n")
        await asyncio.to_thread(self._handle.write, data)

    async def close(self) -> None:
        await asyncio.to_thread(self._handle.close)


class FileStore:
    """Files on ``engine`` (records) and in ``directory`` (content), each at most ``max_bytes``."""

    def __init__(self, engine: AsyncEngine, directory: Path, max_bytes: int) -> None:
        self._engine = engine
        self.directory = directory
        self.max_bytes = max_bytes

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

    async def upload(self, bounded: bool = True) -> Upload:
        """A new upload: a temporary file in the directory (made if missing), at most ``max_bytes``
        unless not ``bounded`` (a batch's results)."""

        def open_temporary() -> tuple[Path, IO[bytes]]:
            self.directory.mkdir(parents=True, exist_ok=True)
            descriptor, name = tempfile.mkstemp(prefix=".upload-", dir=self.directory)
            return Path(name), os.fdopen(descriptor, "wb")

        path, handle = await asyncio.to_thread(open_temporary)
        return Upload(path, handle, self.max_bytes if bounded else None)

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
        """Give up ``upload``: its temporary file removed."""
        await upload.close()
        await asyncio.to_thread(upload.path.unlink, missing_ok=True)

    async def commit(
        self, upload: Upload, key_id: str, filename: str, purpose: str, file_id: str | None = None
    ) -> StoredFile:
        """``upload``, whole, becomes ``key_id``'s file ``filename``: renamed to its id, recorded. A
        ``file_id`` given (a batch's result file, written again after a restart) replaces that file;
        else the id is new."""
        await upload.close()
        stored = StoredFile(
            file_id or FILE_ID_PREFIX + secrets.token_hex(12),
            key_id,
            filename[:255],
            purpose,
            upload.bytes,
            upload.lines,
            datetime.now(UTC),
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

    async def page(
        self,
        key_id: str,
        purpose: str | None,
        after: StoredFile | None,
        limit: int,
        order: Literal["asc", "desc"],
    ) -> tuple[list[StoredFile], bool]:
        """``key_id``'s files (of ``purpose``), ``limit`` of them from just past ``after`` in ``order``
        of creation; and whether more follow."""
        query = select(FileRow).where(FileRow.key_id == key_id)
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


def _stored(row: Any) -> StoredFile:
    created = utc(row.created_at)
    assert created is not None
    return StoredFile(row.id, row.key_id, row.filename, row.purpose, row.bytes, row.lines, created)
