"""The background sweep of expired files (gateway/storage/file_sweep.py): a sweep that fails (here a
database without the files table) is logged and tried again at the next interval; closing waits for
the sweep under way, then stops."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest

from gateway.storage.db import connect
from gateway.storage.file_sweep import FileSweep
from gateway.storage.files import FileStore


async def test_a_failing_sweep_is_logged_and_tried_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = await connect(f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}")  # no schema: every sweep fails
    sweep = FileSweep(FileStore(engine, tmp_path / "files", 10), interval_s=0.01)
    with caplog.at_level(logging.ERROR, logger="gateway.files"):
        sweep.start()
        deadline = time.monotonic() + 60
        while sum("sweep of expired files failed" in r.message for r in caplog.records) < 2:
            assert time.monotonic() < deadline, "the sweep did not try again"
            await asyncio.sleep(0.01)
        await sweep.close()
    await engine.dispose()
