"""Writes the release-0.1.0 database fixtures beside this file, from 0.1.0's own table definitions.

``gateway-0.1.0.sqlite.sql`` (``sqlite3``'s dump) and ``gateway-0.1.0.postgresql.sql`` (the same
tables and rows as PostgreSQL DDL and INSERTs) hold what a 0.1.0 gateway's database held: its
``create_all`` tables, no ``alembic_version``; keys active, rotated within grace, revoked, expired
and an admin; usage rows, audit rows and a stored response's owner. ``gateway-0.1.0.keys.json``
names each key's secrets and whether it authenticates (test keys: they open nothing but these files).

Run from the repository (it reads 0.1.0's ``gateway/tables.py`` from git): ``.venv/bin/python
tests/data/gateway-0.1.0-dump.py``. The output is the same on every run.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sqlite3
import subprocess
import sys
import tempfile
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import JSON, String, Table, create_engine, literal
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateIndex, CreateTable

HERE = Path(__file__).resolve().parent
#: The commit of release 0.1.0 (pyproject's version), whose tables these are.
RELEASE_COMMIT = "8c313f2f45d729a6d994fccefb4dcb0fb6de1365"
MODEL = "deepseek-v4-flash-0731"


def tables_of_release() -> types.ModuleType:
    """0.1.0's ``gateway/tables.py`` as a module of its own (SQLAlchemy resolves its annotations in it)."""
    source = subprocess.run(
        ["git", "show", f"{RELEASE_COMMIT}:gateway/tables.py"],
        cwd=HERE, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    module = types.ModuleType("gateway_tables_0_1_0")
    sys.modules[module.__name__] = module
    exec(compile(source, "gateway/tables.py@0.1.0", "exec"), module.__dict__)
    return module


def secret(label: str) -> str:
    """A well-formed, fixed key (``dsk-`` + 43 URL-safe characters)."""
    digest = hashlib.sha256(f"gateway-0.1.0 fixture {label}".encode()).digest()
    return "dsk-" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def json_text(value: Any) -> str:
    """JSON as 0.1.0 wrote it (``gateway.json_codec``: orjson's compact form)."""
    return orjson.dumps(value).decode()


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


FUTURE = at("2099-01-01T00:00:00")
#: name -> (secret, its outcome) for every secret of every key; the rotated key has two.
SECRETS = {
    "team-active": [(secret("active"), "active")],
    "team-rotated": [(secret("rotated-new"), "active"), (secret("rotated-old"), "active")],
    "team-revoked": [(secret("revoked"), "revoked")],
    "team-expired": [(secret("expired"), "expired")],
    "ops": [(secret("ops"), "active")],
}


def key(name: str, created: str, **fields: Any) -> dict[str, Any]:
    row = {
        "id": "key_" + hashlib.sha256(name.encode()).hexdigest()[:24],
        "name": name,
        "key_hash": sha256(SECRETS[name][0][0]),
        "prefix": SECRETS[name][0][0][:8] + "…",
        "created_at": at(created),
        "expires_at": None,
        "revoked_at": None,
        "last_used_at": None,
        "models": None,
        "scopes": [],
        "default_thinking": None,
        "rpm": None,
        "tpm": None,
        "max_concurrency": None,
        "priority": 1,
        "metadata": {},
        "previous_hash": None,
        "previous_expires_at": None,
    }
    return {**row, **fields}


KEYS = [
    key("team-active", "2026-01-05T09:00:00", models=[MODEL], rpm=60, tpm=100000, max_concurrency=2,
        priority=3, default_thinking="high", metadata={"team": "a", "cost_center": 17},
        last_used_at=at("2026-02-01T12:30:00")),
    key("team-rotated", "2026-01-06T09:00:00", previous_hash=sha256(SECRETS["team-rotated"][1][0]),
        previous_expires_at=FUTURE),
    key("team-revoked", "2026-01-07T09:00:00", revoked_at=at("2026-01-20T10:00:00")),
    key("team-expired", "2026-01-08T09:00:00", expires_at=at("2026-01-09T09:00:00")),
    key("ops", "2026-01-01T08:00:00", scopes=["admin"]),
]  # fmt: skip
ACTIVE_ID, ROTATED_ID, OPS_ID = KEYS[0]["id"], KEYS[1]["id"], KEYS[4]["id"]


def usage(n: int, key_row: dict[str, Any], route: str, **fields: Any) -> dict[str, Any]:
    row = {
        "request_id": f"req-0.1.0-{n}",
        "key_id": key_row["id"],
        "key_name": key_row["name"],
        "model": MODEL,
        "route": route,
        "stream": True,
        "arrived_at": at(f"2026-02-0{n}T10:00:00"),
        "status": 200,
        "finish_reason": "stop",
        "client_disconnected": False,
        "prompt_tokens": 100 * n,
        "completion_tokens": 10 * n,
        "cached_tokens": n,
        "reasoning_tokens": 5 * n,
        "queue_wait_s": 0.01,
        "ttft_s": 0.25,
        "upstream_ttft_s": 0.24,
        "decode_tokens_per_s": 88.5,
        "e2e_s": 1.5,
        "spec": {"k": 5, "source": "backend", "accepted_per_step": 2.9},
        "spec_candidates": [{"source": "backend", "steps": 10, "accepted": 29}],
    }
    return {"id": n, **row, **fields}


USAGE = [
    usage(1, KEYS[0], "chat"),
    usage(2, KEYS[0], "responses", stream=False, spec=None, spec_candidates=[]),
    usage(3, KEYS[1], "messages", status=499, finish_reason=None, client_disconnected=True),
]
AUDIT = [
    {"id": 1, "at": at("2026-01-07T09:00:00"), "actor": "ops", "action": "create", "target": "team-revoked",
     "client": "127.0.0.1", "detail": {"prefix": KEYS[2]["prefix"], "actor_id": OPS_ID, "actor_kind": "key"}},
    {"id": 2, "at": at("2026-01-20T10:00:00"), "actor": "ops", "action": "revoke", "target": "team-revoked",
     "client": "127.0.0.1", "detail": {"actor_id": OPS_ID, "actor_kind": "key"}},
]  # fmt: skip
OWNERS = [{"response_id": "resp_0_1_0", "key_id": ACTIVE_ID, "created_at": at("2026-02-02T10:00:00")}]


def rows(module: types.ModuleType) -> list[tuple[Table, list[dict[str, Any]]]]:
    return [
        (module.ApiKeyRow.__table__, KEYS),
        (module.AuditRow.__table__, AUDIT),
        (module.UsageRow.__table__, USAGE),
        (module.ResponseOwnerRow.__table__, OWNERS),
    ]


def sqlite_dump(module: types.ModuleType) -> str:
    """The tables made as 0.1.0 made them (``create_all``, JSON in orjson's form), then dumped."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "gateway.db"
        engine = create_engine(f"sqlite:///{path}", json_serializer=json_text)
        with engine.begin() as conn:
            module.Base.metadata.create_all(conn)
            for table, values in rows(module):
                conn.execute(table.insert(), values)
        engine.dispose()
        with sqlite3.connect(path) as db:
            dump = "\n".join(db.iterdump())
        return dump + "\n"


def postgresql_dump(module: types.ModuleType) -> str:
    """The same tables as ``create_all`` would make them on PostgreSQL, and the same rows."""
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]
    lines = []
    for table in module.Base.metadata.sorted_tables:
        lines.append(str(CreateTable(table).compile(dialect=dialect)).strip() + ";")
        lines += [str(CreateIndex(index).compile(dialect=dialect)) + ";" for index in table.indexes]
    for table, values in rows(module):
        for row in values:
            encoded = {  # JSON as a string literal: PostgreSQL casts it (no JSON literal renderer)
                name: literal(json_text(value), String) if isinstance(table.c[name].type, JSON) else value
                for name, value in row.items()
            }
            insert = table.insert().values(encoded)
            lines.append(str(insert.compile(dialect=dialect, compile_kwargs={"literal_binds": True})) + ";")
    for table in ("audit_log", "usage_ledger"):  # the serial sequences continue after the rows given
        lines.append(f"SELECT setval('{table}_id_seq', (SELECT max(id) FROM {table}));")
    return "\n".join(lines) + "\n"


def main() -> None:
    module = tables_of_release()
    (HERE / "gateway-0.1.0.sqlite.sql").write_text(sqlite_dump(module))
    (HERE / "gateway-0.1.0.postgresql.sql").write_text(postgresql_dump(module))
    keys = [
        {"name": name, "secret": value, "status": status}
        for name, secrets in SECRETS.items()
        for value, status in secrets
    ]
    (HERE / "gateway-0.1.0.keys.json").write_text(json.dumps(keys, indent=1) + "\n")


if __name__ == "__main__":
    main()
