"""A batch's requests, parsed once: its input file checked (:class:`~gateway.batch.lines.InputCheck`)
when the batch is validated, and the requests it holds kept in a file of their own, read back by the
run and the finalization instead of the input (which they would otherwise parse again, whole, twice).

The check runs off the event loop: the input's lines are read as the file store reads them (a
megabyte at a time, in a thread) and handed to a thread :data:`STEP_BYTES` at a time, where each is
measured (in pieces) and parsed; so the loop never waits on a parse, and a thread never runs one
long call that keeps the loop from its turn.

The requests file (``<files directory>/.batches/<batch id>.requests``, shared by the replicas as the
files are) is a sequence of records, each a little-endian header ``(line index: u64, custom_id bytes:
u32, body bytes: u64)`` followed by the ``custom_id`` (UTF-8) and the body (the JSON sent). It is
written whole under a temporary name (an upload's, swept as theirs are) and renamed, so a reader
never sees half of it; it is written only for an input without errors, and removed when the batch
ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import struct
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

from gateway.batch.lines import BatchLine, InputCheck, LineError
from gateway.body.json_limits import JsonLimits
from gateway.storage.files import READ_BYTES, FileStore, StoredFile

#: A record's header: line index, custom_id bytes, body bytes.
RECORD = struct.Struct("<QIQ")
#: Input bytes checked per thread call (the lines read so far, at least one).
STEP_BYTES = 1024 * 1024


def requests_path(directory: Path, batch_id: str) -> Path:
    """Where batch ``batch_id``'s requests file is, for files kept in ``directory``."""
    return directory / ".batches" / f"{batch_id}.requests"


async def prepare(
    files: FileStore, stored: StoredFile, target: Path, endpoint: str, max_line_bytes: int, limits: JsonLimits
) -> tuple[int, list[LineError]]:
    """``stored`` (a batch's input, for ``endpoint``) checked, each line at most ``max_line_bytes`` in
    ``limits``: (its number of requests, the errors found). Without errors its requests are written
    to ``target``."""
    checking = InputCheck(endpoint, max_line_bytes, limits)
    path, handle = await asyncio.to_thread(_temporary, files.directory, target)
    try:
        pending: list[bytes] = []
        size = 0
        async for raw in files.lines(stored, max_line_bytes):
            pending.append(raw)
            size += len(raw)
            if size >= STEP_BYTES:
                await asyncio.to_thread(_check, checking, pending, handle)
                pending, size = [], 0
        await asyncio.to_thread(_check, checking, pending, handle)
        total, errors = checking.result()
        await asyncio.to_thread(handle.close)
        if not errors:
            await asyncio.to_thread(os.replace, path, target)
        return total, errors
    finally:
        handle.close()
        with contextlib.suppress(FileNotFoundError):
            await asyncio.to_thread(path.unlink)


async def read_requests(path: Path) -> AsyncIterator[BatchLine]:
    """The requests of the requests file at ``path``, in the input's order, read off the loop.
    Raises ``FileNotFoundError`` when there is none."""
    handle = await asyncio.to_thread(open, path, "rb")
    try:
        while lines := await asyncio.to_thread(_read, handle):
            for line in lines:
                yield line
    finally:
        handle.close()


async def remove(path: Path) -> None:
    """The requests file at ``path`` gone (its batch ended), if it is there."""
    with contextlib.suppress(FileNotFoundError):
        await asyncio.to_thread(path.unlink)


def _temporary(directory: Path, target: Path) -> tuple[Path, IO[bytes]]:
    """A temporary file named as an upload's in ``directory`` (so that one a killed process left is
    swept as theirs are), and ``target``'s folder made."""
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(prefix=".upload-batch-", dir=directory)
    return Path(name), os.fdopen(descriptor, "wb")


def _check(checking: InputCheck, raws: list[bytes], handle: IO[bytes]) -> None:
    """``raws`` (the input's next lines) checked; the requests written while the input has no error."""
    for raw in raws:
        line = checking.add(raw)
        if line is not None and not checking.failed:
            custom_id = line.custom_id.encode()
            handle.write(RECORD.pack(line.index, len(custom_id), len(line.body)) + custom_id)
            handle.write(line.body)


def _read(handle: IO[bytes]) -> list[BatchLine]:
    """The next records of ``handle``: about :data:`READ_BYTES` of them (at least one), none at its end."""
    lines: list[BatchLine] = []
    size = 0
    while size < READ_BYTES and (header := handle.read(RECORD.size)):
        index, id_bytes, body_bytes = RECORD.unpack(header)
        custom_id = handle.read(id_bytes).decode()
        lines.append(BatchLine(index, custom_id, handle.read(body_bytes)))
        size += RECORD.size + id_bytes + body_bytes
    return lines
