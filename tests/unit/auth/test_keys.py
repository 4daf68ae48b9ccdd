"""Key store and authenticator on a real SQLite file."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import event

from gateway.admin.durations import parse_duration
from gateway.auth import Authenticator, KeyExistsError, KeyStore
from gateway.auth.secrets import is_well_formed
from gateway.dialects.wire import bearer_token
from gateway.errors import GatewayError
from gateway.storage.db import open_engine


@pytest.fixture
async def store(tmp_path: Path):
    s = await KeyStore.open(f"sqlite+aiosqlite:///{tmp_path / 'sub' / 'keys.db'}")
    yield s
    await s.close()


async def test_only_the_hash_is_stored(store: KeyStore, tmp_path: Path) -> None:
    record, secret = await store.create("team-a", models=["m1"])
    assert is_well_formed(secret) and record.prefix == secret[:8] + "…"
    raw = (tmp_path / "sub" / "keys.db").read_bytes()
    assert secret.encode() not in raw
    assert hashlib.sha256(secret.encode()).hexdigest().encode() in raw


async def test_duplicate_name_rejected(store: KeyStore) -> None:
    await store.create("dup")
    with pytest.raises(KeyExistsError):
        await store.create("dup")


async def test_authenticate_paths(store: KeyStore) -> None:
    auth = Authenticator(store, ttl_s=0)
    _, good = await store.create("good", models=["m1"])
    _, expired = await store.create("old", expires_at=datetime.now(UTC) - timedelta(seconds=1))
    principal = await auth.authenticate(good)
    assert principal.name == "good" and principal.may_use("m1") and not principal.may_use("m2")
    for header, reason in [
        (None, "Missing"),
        ("Basic abc", "Malformed"),
        ("Bearer ", "Malformed"),
        ("Bearer sk-not-ours", "Invalid"),
        ("Bearer dsk-" + "A" * 43, "Invalid"),
        (f"Bearer {expired}", "expired"),
    ]:
        with pytest.raises(GatewayError) as info:
            await auth.authenticate(bearer_token(header))
        assert info.value.status == 401 and info.value.code == "invalid_api_key"
        assert reason in info.value.message
    await store.revoke("good")
    with pytest.raises(GatewayError, match="revoked"):
        await auth.authenticate(good)
    await auth.aclose()


async def test_cache_bounds_revocation_delay(store: KeyStore) -> None:
    now = [100.0]
    auth = Authenticator(store, ttl_s=1.0, clock=lambda: now[0])
    _, secret = await store.create("cached")
    await auth.authenticate(secret)
    await store.revoke("cached")
    now[0] += 0.99
    await auth.authenticate(secret)  # still cached: allowed
    now[0] += 0.02
    with pytest.raises(GatewayError):
        await auth.authenticate(secret)
    await auth.aclose()


async def test_last_used_is_recorded(store: KeyStore) -> None:
    auth = Authenticator(store, ttl_s=0)
    record, secret = await store.create("user")
    assert record.last_used_at is None
    await auth.authenticate(secret)
    await auth.aclose()
    (listed,) = await store.list()
    assert listed.last_used_at is not None


def test_parse_duration() -> None:
    assert parse_duration("30d") == timedelta(days=30)
    assert parse_duration("15m") == timedelta(minutes=15)
    for bad in ["", "30", "-1d", "0h", "1y"]:
        with pytest.raises(ValueError):
            parse_duration(bad)


async def test_concurrent_lookups_of_one_key_make_one_query(tmp_path: Path) -> None:
    """32 requests arriving as the cache entry expires: one store query, every request answered, and a
    requester that is cancelled (its client left) does not fail the others."""
    engine = await open_engine(f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}")
    store = KeyStore(engine)
    _, secret = await store.create("busy")
    selects: list[str] = []

    def count(_conn, _cursor, statement: str, *_: object) -> None:
        if statement.lstrip().upper().startswith("SELECT"):
            selects.append(statement)

    event.listen(engine.sync_engine, "before_cursor_execute", count)
    auth = Authenticator(store, ttl_s=60)
    principals = await asyncio.gather(*(auth.authenticate(secret) for _ in range(32)))
    assert {p.name for p in principals} == {"busy"} and len(selects) == 1

    auth = Authenticator(store, ttl_s=0)
    tasks = [asyncio.create_task(auth.authenticate(secret)) for _ in range(3)]
    await asyncio.sleep(0)
    tasks[0].cancel()
    assert [p.name for p in await asyncio.gather(*tasks[1:])] == ["busy", "busy"]
    assert tasks[0].cancelled() and len(selects) == 2
    await engine.dispose()
