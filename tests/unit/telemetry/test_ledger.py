"""The usage ledger's batched writer on a real SQLite database."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gateway.errors import GatewayError
from gateway.storage.db import open_engine
from gateway.telemetry.ledger import UsageLedger
from gateway.telemetry.record import RequestTelemetry
from gateway.telemetry.spec import SpecStats


def record(request_id: str) -> RequestTelemetry:
    return RequestTelemetry(
        request_id=request_id, key_id="k", key_name="team", model="m", route="/v1/chat/completions",
        api="chat", stream=False, arrived_at=datetime.now(UTC), status=200,
    )  # fmt: skip


async def test_close_while_the_writer_is_mid_batch_keeps_the_batch(tmp_path: Path) -> None:
    """Shutdown lands while the background writer is inside its transaction: the batch it holds is
    written, not lost with a cancelled transaction (each round yields a different point in the write)."""
    for round_ in range(8):
        engine = await open_engine(f"sqlite+aiosqlite:///{tmp_path / f'ledger-{round_}.db'}")
        ledger = UsageLedger(engine, flush_interval_s=60, batch_size=1)
        ledger.start()
        ledger.add(record(f"r{round_}"))  # a full batch: wakes the writer
        for _ in range(round_):
            await asyncio.sleep(0)
        await ledger.close()
        rows = await ledger.recent(10)
        await engine.dispose()
        assert [row["request_id"] for row in rows] == [f"r{round_}"], f"round {round_}"


async def test_a_row_reads_back_as_the_record_wrote_it(tmp_path: Path) -> None:
    """Every column, the two JSON ones included (``spec`` and its candidates), round-trips."""
    engine = await open_engine(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    ledger = UsageLedger(engine, flush_interval_s=60)
    stream = SpecStats("stream", 4, 9, 20, 0.45, 3.25)
    delta = SpecStats("metrics_delta", 4, 8, 20, 0.4, 3.0, exact=False)
    wrote = RequestTelemetry(
        request_id="r1", key_id="key_1", key_name="team", model="m", route="/v1/chat/completions", api="chat",
        stream=True, arrived_at=datetime(2026, 11, 30, 12, 0, 1, 250000, tzinfo=UTC), status=200,
        queue_wait_s=0.5, upstream_ttft_s=0.25, ttft_s=0.75, decode_tokens_per_s=95.5, e2e_s=2.0,
        prompt_tokens=12, completion_tokens=13, cached_tokens=4, reasoning_tokens=6, finish_reason="length",
        client_disconnected=True, spec=stream, spec_candidates=[stream, delta],
    )  # fmt: skip
    ledger.add(wrote)
    assert await ledger.flush() == 1
    (row,) = await ledger.recent(1)
    await engine.dispose()
    expected = wrote.as_record()
    assert isinstance(row.pop("id"), int) and row == {name: expected[name] for name in row}
    assert row["spec"] == {"source": "stream", "steps": 4, "accepted_tokens": 9, "draft_tokens": 20,
                           "acceptance_rate": 0.45, "mean_acceptance_length": 3.25}  # fmt: skip
    assert row["spec_candidates"][1]["exact"] is False  # kept for metrics_delta only
    assert row["arrived_at"] == "2026-11-30T12:00:01.250000+00:00"


async def test_series_buckets_arrivals_in_the_database(tmp_path: Path) -> None:
    """Bucketed by SQLite's ``strftime('%s')`` (the PostgreSQL twin: tests/storage/test_postgres_store.py)."""
    engine = await open_engine(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    ledger = UsageLedger(engine, flush_interval_s=60)
    for request_id, second, key in (("a", 1, "team"), ("b", 59, "team"), ("c", 90, "ops"), ("d", 200, "ops")):
        wrote = record(request_id)
        wrote.key_name, wrote.prompt_tokens = key, 10
        wrote.arrived_at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC) + timedelta(seconds=second)
        ledger.add(wrote)
    await ledger.flush()
    start = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    rows = await ledger.series("key", start, start + timedelta(seconds=180), 60)
    noon = int(start.timestamp())
    assert [(r["bucket"], r["key"], r["requests"], r["prompt_tokens"]) for r in rows] == [
        (noon, "team", 2, 20), (noon + 60, "ops", 1, 10),
    ]  # fmt: skip
    (ops,) = [
        r
        for r in await ledger.usage("key", since=start, until=start + timedelta(seconds=180))
        if r["key"] == "ops"
    ]
    assert ops["requests"] == 1  # the one at 200 s is after the end
    await engine.dispose()


async def test_a_row_the_database_refuses_is_dropped_and_the_others_written(tmp_path: Path) -> None:
    engine = await open_engine(f"sqlite+aiosqlite:///{tmp_path / 'ledger.db'}")
    ledger = UsageLedger(engine, flush_interval_s=60)
    bad = record("bad")
    bad.key_id = None  # type: ignore[assignment]  # NOT NULL: refused for what it holds
    for each in (record("r1"), bad, record("r2")):
        ledger.add(each)
    assert await ledger.flush() == 2
    assert ledger.failure is None and ledger.trouble() is None
    assert sorted(row["request_id"] for row in await ledger.recent(10)) == ["r1", "r2"]
    await engine.dispose()


async def test_a_locked_database_keeps_every_row_until_it_writes_each_once(tmp_path: Path) -> None:
    """A write that fails for the database (here another connection holds its write lock) keeps its
    rows, says why, refuses requests once ``max_pending`` rows wait, and writes each row once after."""
    path = tmp_path / "ledger.db"
    engine = await open_engine(f"sqlite+aiosqlite:///{path}?timeout=0.1")
    ledger = UsageLedger(engine, flush_interval_s=60, max_pending=3)
    for name in ("r1", "r2"):
        ledger.add(record(name))
    lock = sqlite3.connect(path, isolation_level=None)
    lock.execute("BEGIN IMMEDIATE")
    assert await ledger.flush() == 0
    assert ledger.trouble() == "2 usage row(s) not written yet: database is locked"
    ledger.check()  # 2 of 3: still served
    ledger.add(record("r3"))
    with pytest.raises(GatewayError) as refused:
        ledger.check()
    assert refused.value.status == 503 and refused.value.code == "ledger_unavailable"
    assert await ledger.flush() == 0 and ledger.unwritten == ledger.backlog == 3
    lock.execute("ROLLBACK")
    lock.close()
    assert await ledger.flush() == 3
    assert ledger.trouble() is None and ledger.unwritten == ledger.backlog == 0
    ledger.check()
    assert [row["request_id"] for row in await ledger.recent(10)] == ["r3", "r2", "r1"]
    await engine.dispose()
