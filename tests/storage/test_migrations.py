"""Schema migrations on real databases. Every database a gateway made before migrations existed
(``tests/data/unversioned/``: one per unversioned shape, made by that commit's own CLI, server and
admin API on SQLite and PostgreSQL by ``make_fixtures.py`` there) is refused by ``serve`` with one
line, recognised by ``db current``, upgraded by the real ``dspark-gateway db upgrade``, and then every
row is still there with every value it had, every secret authenticates or is refused as its own
gateway answered, and the gateway's own classes read every row. A fresh database opens at the newest
revision, which Alembic's ``compare_metadata`` finds equal to ``gateway/storage/tables.py``."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
import openai
import pytest
from alembic import command
from sqlalchemy import Connection, inspect, text
from sqlalchemy.engine import make_url

from gateway.auth import KeyStore
from gateway.auth.audit import AuditLog
from gateway.storage.db import on_connection, open_engine
from gateway.storage.migrations import schema, unversioned
from gateway.storage.response_owners import Owner, ResponseOwners
from gateway.storage.tables import Base
from gateway.telemetry.ledger import UsageLedger
from tests.support.gateway_process import BIN, GatewayProcess, clean_env
from tests.support.servers import free_port

DATA = Path(__file__).resolve().parents[1] / "data" / "unversioned"
MODEL = "deepseek-v4-flash-0731"
UPGRADE_HINT = "run `dspark-gateway db upgrade`"
#: How messages name this gateway's schema.
HEAD_REVISION = "0015"
HEAD = HEAD_REVISION  # not a release's schema yet
#: The shape (its number in ``unversioned.SHAPES``) each fixture's commit made: the commits that
#: followed ``SHAPES[n].commit`` up to the next shape's.
SHAPE_OF = {"0eb4dce": 0, "90ae478": 1, "fe3116e": 2, "58dc2b3": 3, "0ef4d98": 4}


@dataclass(frozen=True)
class Unversioned:
    """One fixture: the commit whose gateway made it, the dialect, each secret with the status its
    gateway answered ``GET /v1/models`` with, each table's row count."""

    commit: str
    dialect: str
    secrets: list[dict[str, Any]]
    rows: dict[str, int]

    @property
    def dump(self) -> str:
        return (DATA / f"{self.commit}.{self.dialect}.sql").read_text()


def fixture(commit: str, dialect: str) -> Unversioned:
    return Unversioned(**json.loads((DATA / f"{commit}.{dialect}.json").read_text()))


def fixtures(dialect: str) -> list[Any]:
    return [pytest.param(fixture(commit, dialect), id=commit) for commit in SHAPE_OF]


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def load_sqlite(path: Path, fixture: Unversioned) -> str:
    """A SQLite file holding ``fixture``; its URL."""
    with sqlite3.connect(path) as db:
        db.executescript(fixture.dump)
    return sqlite_url(path)


def load_postgresql(url: str, fixture: Unversioned) -> None:
    async def load() -> None:
        conn = await asyncpg.connect(url.replace("+asyncpg", "", 1))
        try:
            await conn.execute(fixture.dump)
        finally:
            await conn.close()

    asyncio.run(load())


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``dspark-gateway ARGS`` as a child process, no ``GATEWAY_*`` from this one."""
    return subprocess.run([BIN, *args], env=clean_env(), capture_output=True, text=True, timeout=120)


async def refusal(url: str) -> str:
    """The message ``open_engine`` refuses ``url`` with."""
    with pytest.raises(schema.SchemaError) as refused:
        await open_engine(url)
    return str(refused.value)


def snapshot(conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every gateway table, each column the table has now, in primary-key order."""
    tables = set(unversioned.shape(-1).tables) & set(inspect(conn).get_table_names())
    rows = {}
    for table in sorted(tables):
        columns = ", ".join(f'"{column["name"]}"' for column in inspect(conn).get_columns(table))
        key = ", ".join(inspect(conn).get_pk_constraint(table)["constrained_columns"])
        rows[table] = [
            tuple(row) for row in conn.execute(text(f"SELECT {columns} FROM {table} ORDER BY {key}"))
        ]
    return rows


def kept(before: dict[str, list[tuple[Any, ...]]], conn: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """The rows of ``before``'s tables now, only the columns they had then."""
    rows = {}
    for table, old in before.items():
        width = len(old[0]) if old else 0
        rows[table] = [row[:width] for row in snapshot(conn)[table]]
    return rows


def upgrade_and_check(url: str, fixture: Unversioned, tmp_path: Path) -> None:
    """What an operator does and sees: ``serve`` refuses, ``db current`` recognises the tables,
    ``db upgrade`` upgrades, ``serve`` serves every key as the old gateway did, every row is kept."""
    before = asyncio.run(on_connection(url, snapshot))
    assert {table: len(rows) for table, rows in before.items()} == fixture.rows
    found = asyncio.run(on_connection(url, schema.find))
    assert (found.revision, found.versioned) == ("0001", False)
    assert found.shape == SHAPE_OF[fixture.commit]

    refused = cli("serve", "--port", str(free_port()), "--database-url", url)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    # besides the line naming the database it uses, one line: the refusal
    [line] = [line for line in refused.stderr.splitlines() if not line.startswith("database: ")]
    assert line.startswith("error: database ") and line.endswith(UPGRADE_HINT)
    assert "without alembic_version" in line
    assert "without alembic_version; this gateway needs" in cli("db", "current", "--database-url", url).stdout

    upgraded = cli("db", "upgrade", "--database-url", url)
    assert upgraded.returncode == 0, upgraded.stderr
    [line] = upgraded.stdout.splitlines()
    assert line.startswith("upgraded ")
    assert line.endswith(f" to {HEAD} (aligned with 0001 and stamped first: it had no alembic_version)")
    assert cli("db", "upgrade", "--database-url", url).stdout.endswith(f"at {HEAD} already: nothing to do\n")
    assert cli("db", "current", "--database-url", url).stdout.endswith(f"schema {HEAD}; this gateway's\n")
    assert asyncio.run(on_connection(url, lambda conn: schema.compare(conn, Base.metadata))) == []
    assert asyncio.run(on_connection(url, lambda conn: kept(before, conn))) == before

    gateway = GatewayProcess(clean_env(database_url=url), tmp_path / "gateway.log").start()
    try:
        for key in fixture.secrets:
            client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key["secret"], max_retries=0)
            if key["status_code"] == 200:
                assert [m.id for m in client.models.list()] == [MODEL], key["name"]
            else:
                assert key["status_code"] == 401
                with pytest.raises(openai.AuthenticationError):
                    client.models.list()
    finally:
        gateway.stop()
    asyncio.run(read_by_the_gateway(url, fixture, found.shape))


async def read_by_the_gateway(url: str, fixture: Unversioned, shape: int) -> None:
    """Every key, usage row, audit row and response owner, read by the gateway's own classes."""
    engine = await open_engine(url)
    try:
        now = datetime.now(UTC)
        keys = {record.name: record for record in await KeyStore(engine).list()}
        assert len(keys) == fixture.rows["api_keys"]
        statuses = {key["name"]: key["status_code"] for key in fixture.secrets}
        assert {name for name, record in keys.items() if record.status(now) == "active"} == {
            name for name, status in statuses.items() if status == 200
        }
        active = keys["team-active"]
        assert active.models == (MODEL,) and active.aliases is None and active.last_used_at is not None
        assert keys["team-revoked"].status(now) == "revoked" and keys["team-expired"].status(now) == "expired"
        assert active.default_thinking == ("high" if shape >= 1 else None)
        if "audit_log" in fixture.rows:  # the shape with limits and an admin
            assert (active.rpm, active.tpm, active.max_concurrency, active.priority) == (600, 1000000, 2, 3)
            assert keys["ops"].scopes == ("admin",)
            assert keys["team-api"].metadata == {"team": "api", "cost_center": 17}
            assert keys["team-rotated"].previous_expires_at is not None
        else:  # filled as the gateway fills a key created without them
            assert {(k.priority, tuple(k.metadata), k.rpm) for k in keys.values()} == {(1, (), None)}
        assert len(await UsageLedger(engine).recent(1000)) == fixture.rows.get("usage_ledger", 0)
        assert len(await AuditLog(engine).recent(1000)) == fixture.rows.get("audit_log", 0)
        if fixture.rows.get("response_owners"):
            [(response_id,)] = await on_connection(
                url, lambda c: c.execute(text("SELECT response_id FROM response_owners")).all()
            )
            assert await ResponseOwners(engine).owner(response_id) == Owner(active.id, None)
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


def test_every_unversioned_shape_has_a_fixture_made_by_its_gateway_on_each_dialect() -> None:
    assert sorted(SHAPE_OF.values()) == list(range(len(unversioned.SHAPES)))
    for dialect in ("sqlite", "postgresql"):
        assert sorted(path.name.split(".")[0] for path in DATA.glob(f"*.{dialect}.json")) == sorted(SHAPE_OF)


@pytest.mark.parametrize("fixture", fixtures("sqlite"))
def test_an_unversioned_sqlite_database_is_refused_then_upgraded_keeping_every_key_and_row(
    fixture: Unversioned, tmp_path: Path
) -> None:
    url = load_sqlite(tmp_path / "gateway.db", fixture)
    message = asyncio.run(refusal(url))
    assert message.startswith(f"database {url} has schema ") and message.endswith(UPGRADE_HINT)
    upgrade_and_check(url, fixture, tmp_path)


@pytest.mark.parametrize("commit", ["0ef4d98", "fe3116e"])  # fe3116e: without usage_ledger, an older shape
async def test_tables_of_no_known_schema_are_refused_and_left_alone(commit: str, tmp_path: Path) -> None:
    url = load_sqlite(tmp_path / "gateway.db", fixture(commit, "sqlite"))
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


@pytest.mark.parametrize("fixture", fixtures("postgresql"))
def test_an_unversioned_postgresql_database_is_refused_then_upgraded_keeping_every_key_and_row(
    fixture: Unversioned, pg_database: str, tmp_path: Path
) -> None:
    load_postgresql(pg_database, fixture)
    shown = make_url(pg_database).render_as_string(hide_password=True)
    message = asyncio.run(refusal(pg_database))
    assert message.startswith(f"database {shown} has schema ") and message.endswith(UPGRADE_HINT)
    assert make_url(pg_database).password not in message
    upgrade_and_check(pg_database, fixture, tmp_path)
