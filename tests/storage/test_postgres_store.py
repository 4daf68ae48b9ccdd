"""The key store, audit log and usage ledger on a REAL PostgreSQL (what replicas share in production).

The server is the session's (``postgres_url``: ``TEST_POSTGRES_URL``, a local one, or one started for
the session; tests/support/services.py), and a test fails, not skips, without one: a skipped storage
test proves nothing. Each test works in its own schema, so tests and runs never see each other's rows.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.auth import Authenticator, KeyStore
from gateway.auth.audit import AuditLog
from gateway.auth.principal import Principal
from gateway.errors import GatewayError
from gateway.storage.batches import ACTIVE, BatchStore, LeaseLost
from gateway.storage.tables import Base
from gateway.telemetry.ledger import UsageLedger
from gateway.telemetry.record import RequestTelemetry


@pytest.fixture
async def engine(postgres_url: str) -> AsyncIterator[AsyncEngine]:
    schema = "t_" + uuid.uuid4().hex[:12]
    admin = create_async_engine(postgres_url)
    async with admin.begin() as conn:
        await conn.execute(text(f"CREATE SCHEMA {schema}"))
    engine = create_async_engine(postgres_url, connect_args={"server_settings": {"search_path": schema}})
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    yield engine
    await engine.dispose()
    async with admin.begin() as conn:
        await conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))
    await admin.dispose()


async def test_keys_rotation_and_revocation_on_postgres(engine: AsyncEngine) -> None:
    store = KeyStore(engine)
    record, secret = await store.create("pg-team", models=["m"], rpm=5, metadata={"team": "pg"})
    assert secret is not None and record.metadata == {"team": "pg"}
    auth = Authenticator(store, ttl_s=0)
    assert (await auth.authenticate(secret)).rpm == 5
    _, new = await store.rotate("pg-team", timedelta(hours=1))
    assert (await auth.authenticate(secret)).name == "pg-team"  # grace
    assert (await auth.authenticate(new)).name == "pg-team"
    updated = await store.update(
        record.id, {"rpm": None, "expires_at": datetime.now(UTC) + timedelta(days=1)}
    )
    assert updated.rpm is None and updated.expires_at is not None and updated.expires_at.tzinfo is not None
    await store.revoke(record.id)
    with pytest.raises(GatewayError):
        await auth.authenticate(new)
    await store.delete("pg-team")
    assert await store.list() == []
    await auth.aclose()


async def test_ledger_and_audit_on_postgres(engine: AsyncEngine) -> None:
    ledger = UsageLedger(engine)
    for i in range(3):
        record = RequestTelemetry(
            f"r{i}", "key_1", "pg-team", "m", "/v1/chat/completions", "chat", False, datetime.now(UTC)
        )
        record.status, record.prompt_tokens, record.completion_tokens = 200, 10, 5 + i
        ledger.add(record)
    assert await ledger.flush() == 3
    (row,) = await ledger.usage("key")
    assert (row["key"], row["requests"], row["completion_tokens"]) == ("pg-team", 3, 18)
    (day,) = await ledger.usage("day", since=datetime.now(UTC) - timedelta(hours=1))
    assert day["day"] == datetime.now(UTC).strftime("%Y-%m-%d")
    assert [r["request_id"] for r in await ledger.recent(2)] == ["r2", "r1"]
    noon = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
    for second in (1, 59.7, 90):  # bucketed by FLOOR(EXTRACT(EPOCH …)): 59.7 s is in the first minute
        record = RequestTelemetry(
            f"t{second}", "key_1", "pg-team", "m", "/v1/chat/completions", "chat", False,
            noon + timedelta(seconds=second),
        )  # fmt: skip
        ledger.add(record)
    await ledger.flush()
    rows = await ledger.series("key", noon, noon + timedelta(minutes=2), 60)
    start = int(noon.timestamp())
    assert [(r["bucket"], r["requests"]) for r in rows] == [(start, 2), (start + 60, 1)]
    (until,) = await ledger.usage("key", since=noon, until=noon + timedelta(seconds=60))
    assert until["requests"] == 2
    audit = AuditLog(engine)
    await audit.record(Principal("key_root", "root"), "key.create", "key_1", "127.0.0.1", {"name": "pg-team"})
    assert (await audit.recent(5))[0]["action"] == "key.create"


async def test_a_batch_has_one_holder_and_a_stale_one_writes_nothing_on_postgres(engine: AsyncEngine) -> None:
    """Two replicas' view of one batch (gateway/storage/batches.py): a claim while the lease lives gets
    nothing; once it lapses the next claim raises the fence, and every write of the first holder is
    refused; a line is recorded once; a cancel is not overwritten by a status the runner moves to."""
    store = BatchStore(engine)
    day = timedelta(hours=24)
    made = await store.create("key-1", "/v1/chat/completions", "file-x", day, "24h", {"a": "b"})
    first = await store.claim("replica-a", ttl_s=0.3)
    assert first is not None and await store.claim("replica-b", ttl_s=30) is None
    assert await store.move(first, "in_progress", ("validating",), total=3)
    assert await store.record(first, 0, "c0", True, '{"line": 0}')
    assert not await store.record(first, 0, "c0", True, '{"line": 0}')  # once
    await asyncio.sleep(0.4)  # replica-a stalls past its lease
    second = await store.claim("replica-b", ttl_s=30)
    assert second is not None and second.fence == first.fence + 1
    stale_writes = (
        store.record(first, 1, "c1", True, "{}"),
        store.renew(first, 30),
        store.move(first, "finalizing", ACTIVE),
    )
    for stale in stale_writes:
        with pytest.raises(LeaseLost):
            await stale
    assert await store.record(second, 1, "c1", False, '{"line": 1}')
    assert await store.uses("key-1", "file-x") == made.id and await store.uses("key-2", "file-x") is None
    batch = await store.get(made.id)
    assert batch is not None and (await store.cancel(batch)).status == "cancelling"
    assert not await store.move(second, "in_progress", ("validating", "in_progress"))  # the cancel stands
    batch = await store.get(made.id)
    assert batch is not None and (batch.status, batch.completed, batch.failed) == ("cancelling", 1, 1)
    assert batch.metadata == {"a": "b"} and batch.times["cancelling_at"] is not None
    assert [r async for r in store.results(made.id, ok=True)] == ['{"line": 0}']
    assert await store.answered(made.id) == {0, 1}
    await store.release(second, until=datetime.now(UTC) + day)  # a pause seen as the cancel came
    again = await store.claim("replica-c", ttl_s=30)  # finalized at once, not after the pause
    assert again is not None and again.batch_id == made.id
