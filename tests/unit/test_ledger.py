"""The usage ledger's batched writer on a real SQLite database."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

from gateway.db import open_engine
from gateway.telemetry.ledger import UsageLedger
from gateway.telemetry.record import RequestTelemetry


def record(request_id: str) -> RequestTelemetry:
    return RequestTelemetry(
        request_id=request_id, key_id="k", key_name="team", model="m", route="/v1/chat/completions",
        stream=False, arrived_at=datetime.now(UTC), status=200,
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
