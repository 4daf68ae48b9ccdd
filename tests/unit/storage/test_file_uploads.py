"""An upload's bounds on a real directory and SQLite database (gateway/storage/files.py): a disk that
fills up under it (``ENOSPC`` from a write or from the last flush) is 507 and its temporary file goes;
a disk below its free bytes is noticed mid-upload; two uploads that each fit a key's room but not
together: the second to finish is refused."""

from __future__ import annotations

import errno
import io
from pathlib import Path

import pytest

from gateway.errors import GatewayError
from gateway.storage.db import open_engine
from gateway.storage.file_bounds import FileBounds, Owner
from gateway.storage.files import CHECK_FREE_BYTES, NO_BOUNDS, UNBOUNDED, FileStore, Upload


class FullDisk(io.RawIOBase):
    """A file on a disk with no room: a write (or only the flush at close) fails with ``ENOSPC``."""

    def __init__(self, on_close_only: bool = False) -> None:
        self.on_close_only = on_close_only

    def write(self, data: object) -> int:
        if not self.on_close_only:
            raise OSError(errno.ENOSPC, "No space left on device")
        return len(data)  # type: ignore[arg-type]

    def close(self) -> None:
        if self.on_close_only and not self.closed:
            super().close()
            raise OSError(errno.ENOSPC, "No space left on device")
        super().close()


async def store(tmp_path: Path, bounds: FileBounds = NO_BOUNDS) -> FileStore:
    engine = await open_engine(f"sqlite+aiosqlite:///{tmp_path / 'gateway.db'}")
    return FileStore(engine, tmp_path / "files", 10_000, bounds)


@pytest.mark.parametrize("on_close_only", [False, True])
async def test_a_full_disk_is_507_and_the_temporary_file_goes(tmp_path: Path, on_close_only: bool) -> None:
    files = await store(tmp_path)
    path = tmp_path / "files" / ".upload-full"
    path.parent.mkdir()
    path.write_bytes(b"")
    upload = Upload(path, FullDisk(on_close_only), None)  # type: ignore[arg-type]
    with pytest.raises(GatewayError) as full:
        await upload.write(b"line\n")
        await files.commit(upload, "k", "in.jsonl", "batch")
    assert full.value.status == 507 and full.value.code == "insufficient_storage"
    assert "No space left on device" in full.value.message
    await files.discard(upload)
    assert list((tmp_path / "files").iterdir()) == []


async def test_a_disk_below_its_free_bytes_is_noticed_mid_upload(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    path = tmp_path / "files" / ".upload-low"
    upload = Upload(path, path.open("wb"), None, UNBOUNDED, min_free_bytes=2**62)
    await upload.write(b"x" * (CHECK_FREE_BYTES - 1))  # not looked at yet
    with pytest.raises(GatewayError, match="less than") as low:
        await upload.write(b"x")
    assert low.value.status == 507


async def test_uploads_that_fit_alone_but_not_together_are_refused_at_commit(tmp_path: Path) -> None:
    files = await store(tmp_path, FileBounds(key_bytes=100))
    owner = Owner("k")
    first, second = await files.upload(owner=owner), await files.upload(owner=owner)
    for upload in (first, second):
        await upload.write(b"x" * 60)  # each within the 100 bytes the key had when it began
    kept = await files.commit(first, "k", "a.jsonl", "batch", owner=owner)
    with pytest.raises(GatewayError, match="100 bytes of files \\(60 kept\\)") as over:
        await files.commit(second, "k", "b.jsonl", "batch", owner=owner)
    assert over.value.status == 400 and over.value.code == "storage_quota_exceeded"
    await files.discard(second)
    assert [p.name for p in (tmp_path / "files").iterdir()] == [kept.id]
