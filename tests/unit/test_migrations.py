"""Schema migrations on real databases: a release-0.1.0 database (``tests/data/gateway-0.1.0.*``, made
from 0.1.0's own tables by ``tests/data/gateway-0.1.0-dump.py``) is refused by the gateway and by
``serve`` with one line, upgraded by the real ``dspark-gateway db upgrade``, and then every key
authenticates or is refused as before through a real gateway with the OpenAI SDK, and every usage,
audit and response-owner row reads back through the gateway's own classes; on SQLite files and on
PostgreSQL (a database of the test's own on the session's server). A fresh database opens at the
newest revision, which Alembic's ``compare_metadata`` finds equal to ``gateway/tables.py``."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import openai
import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.engine import make_url

from gateway.auth import KeyStore
from gateway.auth.audit import AuditLog
from gateway.db import on_connection, open_engine
from gateway.migrations import schema
from gateway.response_owners import ResponseOwners
from gateway.tables import Base
from gateway.telemetry.ledger import UsageLedger
from tests.support.gateway_process import BIN, GatewayProcess, clean_env
from tests.support.servers import free_port

DATA = Path(__file__).resolve().parents[1] / "data"
SECRETS: list[dict[str, str]] = json.loads((DATA / "gateway-0.1.0.keys.json").read_text())
MODEL = "deepseek-v4-flash-0731"
UPGRADE_HINT = "run `dspark-gateway db upgrade`"
#: How messages name this gateway's schema.
HEAD_REVISION = "0003"
HEAD = f"{HEAD_REVISION} (0.3.0)"


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def load_sqlite_0_1_0(path: Path) -> str:
    """A SQLite file holding the 0.1.0 fixture; its URL."""
    with sqlite3.connect(path) as db:
        db.executescript((DATA / "gateway-0.1.0.sqlite.sql").read_text())
    return sqlite_url(path)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``dspark-gateway ARGS`` as a child process, no ``GATEWAY_*`` from this one."""
    return subprocess.run([BIN, *args], env=clean_env(), capture_output=True, text=True, timeout=120)


async def refusal(url: str) -> str:
    """The message ``open_engine`` refuses ``url`` with."""
    with pytest.raises(schema.SchemaError) as refused:
        await open_engine(url)
    return str(refused.value)


def assert_refused_as_0_1_0(message: str, shown_url: str) -> None:
    assert "\n" not in message
    needs = f"this gateway needs {HEAD}: {UPGRADE_HINT}"
    assert message == f"database {shown_url} has schema 0001 (0.1.0); {needs}"


def upgrade_and_check(url: str, tmp_path: Path) -> None:
    """What an operator does and sees: ``serve`` refuses, ``db upgrade`` upgrades, ``serve`` serves
    every key as 0.1.0 did, and every row is still there."""
    refused = cli("serve", "--port", str(free_port()), "--database-url", url)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    # besides the line naming the database it uses, one line: the refusal
    [line] = [line for line in refused.stderr.splitlines() if not line.startswith("database: ")]
    assert line.startswith("error: database ") and line.endswith(UPGRADE_HINT)
    assert "0001 (0.1.0) without alembic_version" in cli("db", "current", "--database-url", url).stdout

    upgraded = cli("db", "upgrade", "--database-url", url)
    assert upgraded.returncode == 0, upgraded.stderr
    [line] = upgraded.stdout.splitlines()
    assert line.startswith("upgraded ")
    assert line.endswith(f" from 0001 (0.1.0) to {HEAD} (stamped 0001 first: it had no alembic_version)")
    assert cli("db", "upgrade", "--database-url", url).stdout.endswith(f"at {HEAD} already: nothing to do\n")
    assert cli("db", "current", "--database-url", url).stdout.endswith(f"schema {HEAD}; this gateway's\n")

    gateway = GatewayProcess(clean_env(database_url=url), tmp_path / "gateway.log").start()
    try:
        for key in SECRETS:
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key["secret"], max_retries=0)
            if key["status"] == "active":
                assert [m.id for m in client.models.list()] == [MODEL], key["name"]
            else:
                with pytest.raises(openai.AuthenticationError, match=f"API key is {key['status']}"):
                    client.models.list()
    finally:
        gateway.stop()
    asyncio.run(rows_kept(url))


async def rows_kept(url: str) -> None:
    """Every 0.1.0 key, usage row, audit row and response owner, read by the gateway's own classes."""
    engine = await open_engine(url)
    try:
        now = datetime.now(UTC)
        keys = {record.name: record for record in await KeyStore(engine).list()}
        assert {name: record.status(now) for name, record in keys.items()} == {
            "ops": "active", "team-active": "active", "team-rotated": "active",
            "team-revoked": "revoked", "team-expired": "expired",
        }  # fmt: skip
        active = keys["team-active"]
        assert (active.models, active.rpm, active.tpm, active.max_concurrency, active.priority) == (
            (MODEL,),
            60,
            100000,
            2,
            3,
        )
        assert active.metadata == {"team": "a", "cost_center": 17} and active.default_thinking == "high"
        assert active.aliases is None and active.last_used_at is not None
        assert active.last_used_at > datetime(2026, 2, 1, 12, 30, tzinfo=UTC)  # written by the gateway
        assert keys["team-rotated"].previous_expires_at == datetime(2099, 1, 1, tzinfo=UTC)
        assert keys["ops"].scopes == ("admin",)

        usage = await UsageLedger(engine).recent(10)
        assert [(u["request_id"], u["key_name"], u["route"], u["prompt_tokens"]) for u in usage] == [
            ("req-0.1.0-3", "team-rotated", "messages", 300),
            ("req-0.1.0-2", "team-active", "responses", 200),
            ("req-0.1.0-1", "team-active", "chat", 100),
        ]
        assert usage[2]["spec"] == {"k": 5, "source": "backend", "accepted_per_step": 2.9}
        assert usage[0]["client_disconnected"] is True and usage[0]["status"] == 499
        assert usage[2]["arrived_at"] == "2026-02-01T10:00:00+00:00"
        totals = await UsageLedger(engine).usage("key")
        assert [(t["key"], t["requests"], t["completion_tokens"]) for t in totals] == [
            ("team-active", 2, 30),
            ("team-rotated", 1, 30),
        ]

        audit = await AuditLog(engine).recent(10)
        assert [(a["action"], a["actor"], a["actor_kind"], a["target"]) for a in audit] == [
            ("revoke", "ops", "key", "team-revoked"),
            ("create", "ops", "key", "team-revoked"),
        ]
        assert audit[0]["actor_id"] == keys["ops"].id and audit[1]["detail"]["prefix"] == "dsk-nNd6…"
        assert await ResponseOwners(engine).owner("resp_0_1_0") == active.id
    finally:
        await engine.dispose()


# SQLite


async def test_a_fresh_database_opens_at_the_newest_revision_equal_to_the_tables(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "fresh" / "gateway.db")
    for _ in range(2):  # created, then opened as it is
        engine = await open_engine(url)
        async with engine.connect() as conn:
            assert (await conn.execute(text("SELECT version_num FROM alembic_version"))).all() == [
                (HEAD_REVISION,)
            ]
            assert await conn.run_sync(schema.compare, Base.metadata) == []
        await engine.dispose()


def test_the_cli_creates_the_schema_of_an_empty_database(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "gateway.db")
    missing = cli("db", "current", "--database-url", url)  # a mistyped path makes no database
    assert missing.returncode == 1 and "error: no database at" in missing.stderr
    assert not (tmp_path / "gateway.db").exists()
    assert cli("db", "upgrade", "--database-url", url).stdout == f"created the schema {HEAD} in {url}\n"
    assert cli("db", "current", "--database-url", url).stdout == f"{url}: schema {HEAD}; this gateway's\n"


async def test_concurrent_openers_of_an_empty_database_create_it_once(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "gateway.db")
    engines = await asyncio.gather(*(open_engine(url) for _ in range(4)))
    for engine in engines:
        await engine.dispose()
    assert (await on_connection(url, schema.find)).revision == HEAD_REVISION


def test_a_0_1_0_sqlite_database_is_refused_then_upgraded_keeping_every_key_and_row(tmp_path: Path) -> None:
    url = load_sqlite_0_1_0(tmp_path / "gateway.db")
    assert_refused_as_0_1_0(asyncio.run(refusal(url)), url)
    upgrade_and_check(url, tmp_path)
    assert asyncio.run(on_connection(url, lambda conn: schema.compare(conn, Base.metadata))) == []


async def test_tables_of_no_known_schema_are_refused_and_left_alone(tmp_path: Path) -> None:
    url = load_sqlite_0_1_0(tmp_path / "gateway.db")
    await on_connection(url, lambda conn: conn.exec_driver_sql("DROP INDEX ix_usage_ledger_key_id"))
    message = await refusal(url)
    assert "no alembic_version, and they are not 0.1.0's" in message
    assert "first: add_index ix_usage_ledger_key_id)" in message and "\n" not in message
    refused = await asyncio.to_thread(cli, "db", "upgrade", "--database-url", url)
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.strip() == f"error: {message}"
    with sqlite3.connect(tmp_path / "gateway.db") as db:
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert "alembic_version" not in names


async def test_a_newer_schema_is_refused_by_the_gateway_and_the_upgrade(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "gateway.db")
    await (await open_engine(url)).dispose()
    newer = "UPDATE alembic_version SET version_num = '0099'"
    await on_connection(url, lambda conn: conn.exec_driver_sql(newer))
    message = await refusal(url)
    assert message == (
        f"database {url} has schema 0099, newer than this gateway's {HEAD}: "
        "run the gateway release that made it"
    )
    refused = await asyncio.to_thread(cli, "db", "upgrade", "--database-url", url)
    assert refused.returncode == 1 and refused.stderr.strip() == f"error: {message}"


async def test_the_head_downgrades_to_exactly_0_1_0s_tables(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "gateway.db")
    await (await open_engine(url)).dispose()
    await on_connection(url, lambda conn: command.downgrade(schema.config(conn), "0001"))
    release: Any = schema.scripts().get_revision("0001").module.schema()
    assert await on_connection(url, lambda conn: schema.compare(conn, release)) == []


# PostgreSQL


async def test_a_fresh_postgresql_database_opens_at_the_newest_revision_equal_to_the_tables(
    pg_database: str,
) -> None:
    engines = await asyncio.gather(*(open_engine(pg_database) for _ in range(4)))
    for engine in engines:
        await engine.dispose()
    assert (await on_connection(pg_database, schema.find)).revision == HEAD_REVISION
    assert await on_connection(pg_database, lambda conn: schema.compare(conn, Base.metadata)) == []


def test_a_0_1_0_postgresql_database_is_refused_then_upgraded_keeping_every_key_and_row(
    pg_database: str, tmp_path: Path
) -> None:
    async def load() -> None:
        conn = await asyncpg.connect(pg_database.replace("+asyncpg", "", 1))
        try:
            await conn.execute((DATA / "gateway-0.1.0.postgresql.sql").read_text())
        finally:
            await conn.close()

    asyncio.run(load())
    shown = make_url(pg_database).render_as_string(hide_password=True)
    message = asyncio.run(refusal(pg_database))
    assert_refused_as_0_1_0(message, shown)
    assert make_url(pg_database).password not in message
    upgrade_and_check(pg_database, tmp_path)
    assert asyncio.run(on_connection(pg_database, lambda conn: schema.compare(conn, Base.metadata))) == []
