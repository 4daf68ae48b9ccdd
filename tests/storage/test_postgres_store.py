"""The key store, audit log and usage ledger on a REAL PostgreSQL (what replicas share in production).

The server is the session's (``postgres_url``: ``TEST_POSTGRES_URL``, a local one, or one started for
the session; tests/support/services.py), and a test fails, not skips, without one: a skipped storage
test proves nothing. Each test works in its own schema, so tests and runs never see each other's rows.
"""

from __future__ import annotations

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
    audit = AuditLog(engine)
    await audit.record(Principal("key_root", "root"), "key.create", "key_1", "127.0.0.1", {"name": "pg-team"})
    assert (await audit.recent(5))[0]["action"] == "key.create"
