"""``--database-url`` and GATEWAY_DATABASE_URL take a plain path, ``sqlite:///…``, ``postgresql://…`` or
an async URL; every local command says on stderr which database it uses, its password hidden."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Cli, error_of
from tests.support.servers import free_port


def database_line(stderr: str) -> str:
    (line,) = [line for line in stderr.splitlines() if line.startswith("database: ")]
    return line.removeprefix("database: ")


@pytest.mark.parametrize(
    ("given", "file"),
    [
        ("./gw.db", "gw.db"),  # relative to the working directory
        ("{tmp}/abs.db", "abs.db"),
        ("sqlite:///{tmp}/plain-url.db", "plain-url.db"),
        ("sqlite+aiosqlite:///{tmp}/async-url.db", "async-url.db"),
    ],
)
def test_every_form_opens_the_same_sqlite_file(cli: Cli, tmp_path: Path, given: str, file: str) -> None:
    url = given.format(tmp=tmp_path)
    created = cli("keys", "create", "team-a", "--database-url", url)
    assert database_line(created.stderr) == f"sqlite+aiosqlite:///{tmp_path / file}"
    assert (tmp_path / file).is_file()
    listed = cli("keys", "list", "--database-url", url)  # the same database, found again
    assert "team-a" in listed.stdout and database_line(listed.stderr) == database_line(created.stderr)


def test_the_environment_takes_a_path_too(cli: Cli, tmp_path: Path) -> None:
    used = cli("keys", "create", "from-env", GATEWAY_DATABASE_URL="env.db")
    assert database_line(used.stderr) == f"sqlite+aiosqlite:///{tmp_path / 'env.db'}"
    assert "from-env" in cli("keys", "list", "--database-url", str(tmp_path / "env.db")).stdout


@pytest.mark.parametrize("command", [("audit",), ("keys", "list"), ("serve", "--port", "8089")])
def test_postgres_url_gets_asyncpg_and_its_password_is_never_shown(
    cli: Cli, command: tuple[str, ...]
) -> None:
    port = free_port()  # nothing listens there
    result = cli(*command, "--database-url", f"postgresql://gw:s3cret@127.0.0.1:{port}/gw", ok=False)
    assert database_line(result.stderr) == f"postgresql+asyncpg://gw:***@127.0.0.1:{port}/gw"
    error = error_of(result)
    assert error.startswith(f"error: database postgresql+asyncpg://gw:***@127.0.0.1:{port}/gw: ")
    assert "ConnectionRefusedError" in error
    assert "s3cret" not in result.stderr + result.stdout


@pytest.mark.parametrize(
    ("given", "says"),
    [("", "the database URL is empty"), ("postgresql://h:port/db", "not a database URL or path")],
)
def test_a_database_url_that_is_not_one_is_refused_in_one_line(cli: Cli, given: str, says: str) -> None:
    error = error_of(cli("keys", "list", "--database-url", given, ok=False))
    assert error.startswith("error: invalid Settings: database_url: ") and says in error
