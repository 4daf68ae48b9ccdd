"""Files expire (OpenAI's ``expires_after``, else ``GATEWAY_FILES_DEFAULT_EXPIRY_S``), with the official
``openai`` SDK as the client of real gateways on one database and files directory: an expired file is
gone for its key at once (not listed, not read, not a batch's input) and the background sweep
(gateway/storage/file_sweep.py) deletes its record and content — but not while a batch that has not
ended reads it."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sqlite3
from datetime import timedelta
from pathlib import Path

import openai
import pytest

from gateway.storage.batches import BatchStore
from gateway.storage.db import open_engine
from tests.support.probes import wait_until

CONTENT = b'{"custom_id": "a", "method": "POST", "url": "/v1/chat/completions", "body": {"messages": []}}\n'


def client(gateway: object, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)  # type: ignore[attr-defined]


def upload(sdk: openai.OpenAI, **options: object) -> openai.types.FileObject:
    return sdk.files.create(file=("in.jsonl", io.BytesIO(CONTENT)), purpose="batch", **options)  # type: ignore[arg-type]


def recorded(database: Path, file_id: str) -> bool:
    with contextlib.closing(sqlite3.connect(database)) as db:
        return db.execute("SELECT count(*) FROM files WHERE id = ?", (file_id,)).fetchone()[0] == 1


def reading_batch(database_url: str, database: Path, key_id: str, file_id: str) -> str:
    """A batch of ``key_id`` reading ``file_id``, in progress, held by a process that is not one of
    the test's gateways (so none of them runs it)."""

    async def create() -> str:
        engine = await open_engine(database_url)
        try:
            batch = await BatchStore(engine).create(
                key_id, "/v1/chat/completions", file_id, timedelta(hours=24), "24h", None
            )
        finally:
            await engine.dispose()
        return batch.id

    batch_id = asyncio.run(create())
    with contextlib.closing(sqlite3.connect(database)) as db, db:
        db.execute("UPDATE batches SET status = 'in_progress', holder = 'elsewhere', "
                   "lease_until = '2999-01-01 00:00:00.000000' WHERE id = ?", (batch_id,))  # fmt: skip
    return batch_id


def test_expires_after_is_kept_and_checked_and_a_default_applies(start_sim, start_gateway, make_key) -> None:
    gateway = start_gateway(start_sim().url)
    sdk = client(gateway, make_key("owner"))
    hour = upload(sdk, expires_after={"anchor": "created_at", "seconds": 3600})
    assert hour.expires_at == hour.created_at + 3600
    assert sdk.files.retrieve(hour.id).expires_at == hour.expires_at
    default = upload(sdk)
    assert default.expires_at == default.created_at + 30 * 86_400  # OpenAI's for batch files
    for bad, param in (({"anchor": "created_at", "seconds": 3599}, "expires_after[seconds]"),
                       ({"anchor": "created_at", "seconds": 2_592_001}, "expires_after[seconds]"),
                       ({"anchor": "last_active_at", "seconds": 3600}, "expires_after[anchor]")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as refused:
            upload(sdk, expires_after=bad)
        assert refused.value.param == param and refused.value.code == "invalid_value"


def test_an_expired_file_is_gone_at_once_and_swept_unless_a_running_batch_reads_it(
    start_sim, start_gateway, make_key, database_url: str, tmp_path: Path
) -> None:
    files, database = tmp_path / "files", tmp_path / "gateway.db"
    sim = start_sim()
    key = make_key("owner")
    # no sweep but the one at start: an expired file is refused before any sweep
    first = start_gateway(sim.url, files_dir=files, files_default_expiry_s=1, files_sweep_s=3600)
    sdk = client(first, key)
    alone, read = upload(sdk), upload(sdk)
    assert alone.expires_at == alone.created_at + 1

    wait_until(lambda: sdk.files.list().data == [], timeout_s=60, what="the files to expire")
    with pytest.raises(openai.NotFoundError):
        sdk.files.retrieve(alone.id)
    with pytest.raises(openai.NotFoundError):
        sdk.files.content(read.id)
    with pytest.raises(openai.NotFoundError):
        sdk.batches.create(input_file_id=alone.id, endpoint="/v1/chat/completions", completion_window="24h")
    assert recorded(database, alone.id) and (files / alone.id).exists()  # not swept yet
    first.stop()

    with contextlib.closing(sqlite3.connect(database)) as db:
        (key_id,) = db.execute("SELECT key_id FROM files WHERE id = ?", (read.id,)).fetchone()
    batch_id = reading_batch(database_url, database, key_id, read.id)

    start_gateway(sim.url, files_dir=files, files_default_expiry_s=1, files_sweep_s=0.2)
    wait_until(lambda: not recorded(database, alone.id) and not (files / alone.id).exists(),
               timeout_s=60, what="the sweep to delete the expired file")  # fmt: skip
    assert recorded(database, read.id) and (files / read.id).exists()  # its batch has not ended

    with contextlib.closing(sqlite3.connect(database)) as db, db:
        db.execute("UPDATE batches SET status = 'completed' WHERE id = ?", (batch_id,))
    wait_until(
        lambda: not recorded(database, read.id) and not (files / read.id).exists(),
        timeout_s=60,
        what="the sweep to delete the file its ended batch read",
    )
