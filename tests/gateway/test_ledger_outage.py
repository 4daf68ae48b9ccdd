"""The usage ledger when its database refuses writes (another connection holds SQLite's write lock:
deterministic, and what a full or read-only disk does to the ledger's INSERTs), through a real gateway
and the official SDKs: requests are still served while rows wait in memory, ``/health`` says the
gateway is degraded and why, past ``GATEWAY_LEDGER_MAX_PENDING_ROWS`` new requests are refused 503
``ledger_unavailable`` in their client's API shape rather than served unrecorded, an admin write is
answered 503 ``database_unavailable`` (not a bare 500), and once the database takes writes again every
row is written exactly once."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from gateway.app import create_app
from gateway.config import Settings
from tests.support.probes import scrape, wait_until
from tests.support.servers import ThreadedServer

MODEL = "deepseek-v4-flash-0731"
HI = [{"role": "user", "content": "hi"}]


def rows(database: Path) -> list[str]:
    with contextlib.closing(sqlite3.connect(database)) as db:
        return [r[0] for r in db.execute("SELECT request_id FROM usage_ledger")]


def test_a_ledger_that_cannot_write_keeps_its_rows_refuses_past_its_bound_and_writes_each_once(
    start_sim, make_key, admin, database_url: str, tmp_path: Path
) -> None:
    database = tmp_path / "gateway.db"
    settings = Settings(
        upstream=start_sim().url,
        database_url=database_url + "?timeout=0.3",  # a locked database is reported after 0.3 s
        files_dir=tmp_path / "files",
        ledger_flush_s=0.1,
        ledger_max_pending_rows=3,
    )
    server = ThreadedServer(create_app(settings)).start()
    try:
        key = make_key("owner")
        sdk = openai.OpenAI(base_url=server.url + "/v1", api_key=key, max_retries=0)
        claude = anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0)
        sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=5)
        wait_until(lambda: len(rows(database)) == 1, timeout_s=60, what="the first row")

        lock = sqlite3.connect(database, isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # the write lock: readers read, every other writer is refused
        try:
            served = [sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=5) for _ in range(3)]
            assert all(answer.choices for answer in served)

            def degraded() -> bool:
                health = httpx.get(server.url + "/health").json()
                return health["status"] == "degraded" and health["reasons"] == [
                    "3 usage row(s) not written yet: database is locked"
                ]

            wait_until(degraded, timeout_s=60, what="/health to report the rows waiting")
            assert scrape(server.url)["gateway_ledger_pending_rows"] == 3
            with pytest.raises(openai.APIStatusError) as refused:
                sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=5)
            assert refused.value.status_code == 503 and refused.value.code == "ledger_unavailable"
            assert "cannot record usage (database is locked)" in refused.value.message
            with pytest.raises(anthropic.APIStatusError) as refused_too:
                claude.messages.create(model=MODEL, messages=HI, max_tokens=5)  # type: ignore[arg-type]
            assert refused_too.value.status_code == 503
            assert refused_too.value.body["type"] == "error"  # type: ignore[index]

            made = httpx.post(server.url + "/admin/keys", headers={"Authorization": f"Bearer {admin}"},
                              json={"name": "new"}, timeout=30)  # fmt: skip
            assert made.status_code == 503, made.text
            assert made.json()["error"]["code"] == "database_unavailable"
            assert "database is locked" in made.json()["error"]["message"]
        finally:
            lock.execute("ROLLBACK")
            lock.close()

        wait_until(lambda: httpx.get(server.url + "/health").json() == {"status": "ok"},
                   timeout_s=60, what="the rows to be written")  # fmt: skip
        written = rows(database)
        assert len(written) == 4 == len(set(written))  # the first, the three served; each once
        assert scrape(server.url)["gateway_ledger_pending_rows"] == 0
        sdk.chat.completions.create(model=MODEL, messages=HI, max_tokens=5)  # served again
    finally:
        server.stop()
