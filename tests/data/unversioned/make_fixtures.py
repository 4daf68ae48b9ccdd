"""Writes the fixtures of databases that landed gateways made before schema migrations existed.

Before ``d1f8dc9`` the gateway created its tables with ``create_all`` and wrote no ``alembic_version``;
five table shapes landed that way (``gateway/storage/migrations/unversioned.py`` lists them). For the commit
named for each shape below, this script checks the commit out in a temporary ``git worktree``,
installs it in a virtual environment of its own (its own ``pyproject.toml`` dependencies), and uses
that gateway as an operator did: its CLI creates keys (an admin, limits and a thinking default where
the commit has them), revokes one, lets one expire, rotates one with a grace period; its server (the
built-in simulator behind it) answers chats and stored Responses (usage, response-owner rows) and its
admin API creates and revokes keys (audit rows). Each database is then dumped beside this file:

- ``<commit>.sqlite.sql``: ``sqlite3``'s dump of the SQLite file;
- ``<commit>.postgresql.sql``: ``pg_dump --inserts`` of a throwaway PostgreSQL database;
- ``<commit>.<dialect>.json``: each secret with the status its own gateway answered ``GET /v1/models``
  with, and each table's row count.

The secrets are test keys: they open nothing but these files. Run from the repository with a
PostgreSQL server at ``--postgres`` (trust auth):
``.venv/bin/python tests/data/unversioned/make_fixtures.py [COMMIT ...]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
#: The commit whose gateway made each unversioned shape's fixture (the last commit of each shape; for
#: the schema of 0.1.0's admin API, the commit an operator's upgrade report named).
COMMITS = ("0eb4dce", "90ae478", "fe3116e", "58dc2b3", "0ef4d98")
MODEL = "deepseek-v4-flash-0731"
TABLES = ("api_keys", "usage_ledger", "audit_log", "response_owners")


def run(*args: str | Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    done = subprocess.run([str(a) for a in args], env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{args[:3]} failed ({done.returncode}): {done.stderr[-2000:]}")
    return done.stdout


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def worktree(commit: str, folder: Path) -> Iterator[Path]:
    """``commit`` checked out in a worktree under ``folder``, removed afterwards."""
    path = folder / f"src-{commit}"
    run("git", "worktree", "add", "--detach", path, commit, cwd=REPO)
    try:
        yield path
    finally:
        run("git", "worktree", "remove", "--force", path, cwd=REPO)


def install(source: Path, folder: Path) -> Path:
    """A virtual environment with ``source`` installed (its own dependencies); its ``python``."""
    venv = folder / f"venv-{source.name}"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    run(
        python, "-m", "pip", "install", "-q", source, "asyncpg"
    )  # PostgreSQL's driver, as an operator adds it
    return python


class OldGateway:
    """One commit's CLI and server on one database."""

    def __init__(self, python: Path, database_url: str, folder: Path) -> None:
        self.command = python.parent / "dspark-gateway"  # the commit's own entry point
        self.folder = folder
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("GATEWAY_")}
        self.env |= {"GATEWAY_DATABASE_URL": database_url, "HOME": str(folder)}
        self.help = self.cli("keys", "--help") + self.cli("keys", "create", "--help")

    def cli(self, *args: str) -> str:
        return run(self.command, *args, env=self.env, cwd=self.folder)

    def has(self, option: str) -> bool:
        return option in self.help

    def create(self, name: str, *options: str) -> str:
        """``keys create``; the secret (the last line)."""
        return self.cli("keys", "create", name, *options).strip().splitlines()[-1]

    @contextlib.contextmanager
    def serving(self) -> Iterator[httpx.Client]:
        """``serve`` on a free port (the built-in simulator upstream); stopped with SIGTERM, which
        flushes its usage ledger."""
        port = free_port()
        log = (self.folder / "serve.log").open("w")
        process = subprocess.Popen(
            [self.command, "serve", "--port", str(port)],
            env=self.env, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60)
        try:
            for _ in range(300):
                with contextlib.suppress(httpx.HTTPError):
                    if client.get("/health").status_code == 200:
                        break
                time.sleep(0.1)
            else:
                raise RuntimeError(f"serve did not start: {(self.folder / 'serve.log').read_text()[-2000:]}")
            yield client
        finally:
            client.close()
            process.send_signal(signal.SIGTERM)
            process.wait(60)
            log.close()


def use(gateway: OldGateway) -> list[dict[str, Any]]:
    """What an operator and their clients did with ``gateway``; each secret with its status."""
    secrets: list[dict[str, Any]] = []

    def keep(name: str, secret: str) -> str:
        secrets.append({"name": name, "secret": secret})
        return secret

    options = ["--models", MODEL, "--expires-in", "3650d"]
    if gateway.has("--thinking"):
        options += ["--thinking", "high"]
    if gateway.has("--rpm"):
        options += ["--rpm", "600", "--tpm", "1000000", "--max-concurrency", "2", "--priority", "3"]
    active = keep("team-active", gateway.create("team-active", *options))
    keep("team-revoked", gateway.create("team-revoked"))
    gateway.cli("keys", "revoke", "team-revoked")
    keep("team-expired", gateway.create("team-expired", "--expires-in", "1s"))
    admin = keep("ops", gateway.create("ops", "--admin")) if gateway.has("--admin") else None
    if gateway.has("rotate"):
        keep("team-rotated", gateway.create("team-rotated"))
        rotated = gateway.cli("keys", "rotate", "team-rotated", "--grace", "3650d").strip().splitlines()[-1]
        keep("team-rotated", rotated)
    time.sleep(1.5)  # team-expired's second

    with gateway.serving() as client:
        bearer = {"Authorization": f"Bearer {active}"}
        chat = {"model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}
        assert client.post("/v1/chat/completions", json=chat, headers=bearer).status_code == 200
        with client.stream("POST", "/v1/chat/completions", json=chat | {"stream": True}, headers=bearer) as r:
            assert r.status_code == 200 and b"[DONE]" in r.read()
        responses = {"model": MODEL, "input": "Hello", "max_output_tokens": 16, "store": True}
        # a stored response's owner where the commit has the Responses API (else a 404)
        client.post("/v1/responses", json=responses, headers=bearer)
        by_admin = {"Authorization": f"Bearer {admin}"}
        body = {"name": "team-api", "models": [MODEL], "metadata": {"team": "api", "cost_center": 17}}
        made = client.post("/admin/keys", json=body, headers=by_admin)
        if admin is not None and made.status_code not in (404, 405):  # the admin API
            assert made.status_code == 201, made.text
            keep("team-api", made.json()["key"])
            made = client.post("/admin/keys", json={"name": "team-api-revoked"}, headers=by_admin)
            keep("team-api-revoked", made.json()["key"])
            revoked = client.post(f"/admin/keys/{made.json()['id']}/revoke", headers=by_admin)
            assert revoked.status_code == 200, revoked.text
        time.sleep(1.5)  # past the key cache's TTL: the revocations are seen
        for secret in secrets:
            answer = client.get("/v1/models", headers={"Authorization": f"Bearer {secret['secret']}"})
            secret["status_code"] = answer.status_code
    return secrets


def sqlite_fixture(python: Path, commit: str, folder: Path) -> None:
    path = folder / f"{commit}.db"
    secrets = use(OldGateway(python, f"sqlite+aiosqlite:///{path}", folder))
    with sqlite3.connect(path) as db:
        dump = "\n".join(db.iterdump()) + "\n"
        names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        counts = {t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES if t in names}
    (HERE / f"{commit}.sqlite.sql").write_text(dump)
    write_manifest(commit, "sqlite", secrets, counts)


def postgresql_fixture(python: Path, commit: str, folder: Path, server: str) -> None:
    database = f"gateway_unversioned_{commit}"
    psql = ["psql", "-v", "ON_ERROR_STOP=1", "-qAt", server]
    run(*psql, "-c", f"DROP DATABASE IF EXISTS {database}")
    run(*psql, "-c", f"CREATE DATABASE {database}")
    url = f"{server.rstrip('/').rsplit('/', 1)[0]}/{database}"
    try:
        secrets = use(OldGateway(python, url.replace("postgresql://", "postgresql+asyncpg://"), folder))
        dump = run("pg_dump", "--inserts", "--no-owner", "--no-privileges", "--no-comments", url)
        # SQL only: pg_dump's psql meta-commands (\restrict) would stop a driver executing the dump
        dump = "".join(line for line in dump.splitlines(keepends=True) if not line.startswith("\\"))
        names = set(run("psql", "-qAt", url, "-c", "SELECT tablename FROM pg_tables").split())
        counts = {
            t: int(run("psql", "-qAt", url, "-c", f"SELECT count(*) FROM {t}")) for t in TABLES if t in names
        }
    finally:
        run(*psql, "-c", f"DROP DATABASE IF EXISTS {database}")
    (HERE / f"{commit}.postgresql.sql").write_text(dump)
    write_manifest(commit, "postgresql", secrets, counts)


def write_manifest(commit: str, dialect: str, secrets: list[dict[str, Any]], counts: dict[str, int]) -> None:
    manifest = {"commit": commit, "dialect": dialect, "secrets": secrets, "rows": counts}
    (HERE / f"{commit}.{dialect}.json").write_text(json.dumps(manifest, indent=1) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("commits", nargs="*", default=COMMITS)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="gateway-unversioned-") as tmp:
        folder = Path(tmp)
        for commit in args.commits:
            with worktree(commit, folder) as source:
                python = install(source, folder)
                sqlite_fixture(python, commit, folder)
                postgresql_fixture(python, commit, folder, args.postgres)
            print(f"{commit}: written", flush=True)


if __name__ == "__main__":
    main()
