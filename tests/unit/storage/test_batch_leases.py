"""Claims on batches (gateway/storage/batches.py), on a SQLite file: a process running several
batches claims one it does not run already; a batch paused is not claimed before its pause ends,
unless a cancel came while it was still held, which leaves it to be finalized at once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from gateway.storage.batches import BatchStore
from gateway.storage.db import open_engine

DAY = timedelta(hours=24)


async def test_claims_skip_the_batches_run_already_and_a_pause_yields_to_a_cancel(tmp_path: Path) -> None:
    engine = await open_engine(f"sqlite+aiosqlite:///{tmp_path / 'batches.db'}")
    try:
        store = BatchStore(engine)
        old = await store.create("key-a", "/v1/chat/completions", "file-a", DAY, "24h", None)
        new = await store.create("key-b", "/v1/chat/completions", "file-b", DAY, "24h", None)
        first = await store.claim("p1", ttl_s=0.01)  # lapses at once: claimable again by anyone
        assert first is not None and first.batch_id == old.id
        other = await store.claim("p1", ttl_s=30, exclude={old.id})  # not its own lapsed one again
        assert other is not None and other.batch_id == new.id
        assert await store.claim("p1", ttl_s=30, exclude={old.id, new.id}) is None

        later = datetime.now(UTC) + DAY
        await store.release(other, until=later)  # paused: nobody takes it before then
        assert await store.claim("p2", ttl_s=30, exclude={old.id}) is None
        held = await store.claim("p2", ttl_s=30)
        assert held is not None and held.batch_id == old.id
        assert await store.move(held, "in_progress", ("validating",), total=1)
        batch = await store.get(old.id)
        assert batch is not None and (await store.cancel(batch)).status == "cancelling"
        await store.release(held, until=later)  # the pause its runner saw came with the cancel
        again = await store.claim("p3", ttl_s=30)  # finalized at once, not after the pause
        assert again is not None and again.batch_id == old.id
    finally:
        await engine.dispose()
