"""Every CLI failure is one line on stderr and a non-zero exit, never a traceback; ``--debug`` (or
DSPARK_DEBUG=1) shows the traceback instead."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import typer

from gateway.cli.failures import run
from gateway.cli.main import root
from tests.cli.conftest import Cli, error_of, last_line


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("keys", "create", "x", "--expires-in", "soon"), "--expires-in: invalid duration 'soon'"),
        (("keys", "update", "x", "--expires-in", "-3d"), "--expires-in: invalid duration '-3d'"),
        (("keys", "rotate", "x", "--grace", "1y"), "--grace: invalid duration '1y'"),
        (("usage", "--since", "yesterday"), "--since: must be a positive duration like 7d"),
        (
            ("usage", "--since", "0s"),
            "--since: must be a positive duration like 7d or an ISO 8601 time; got '0s'",
        ),
        (
            ("serve", "--upstream", "localhost:8000"),
            "invalid Settings: upstream: must be an absolute http:// or https:// URL with a host",
        ),
        (("keys", "update", "x", "--no-expiry", "--expires-in", "3d"), "--no-expiry and --expires-in"),
        (("keys", "update", "x"), "nothing to change"),
        (("keys", "create", "x", "--thinking", "extreme"), "--thinking: must be one of off, low, high"),
        (("keys", "create", "jwt:x"), "key names may not start with 'jwt:'"),
        (("keys", "revoke", "nobody"), "no key 'nobody'"),
        (("keys", "show", "nobody"), "no key 'nobody'"),
        (("status",), "give --url"),
    ],
)
def test_refusals_are_one_line(
    cli: Cli, make_key: Callable[..., str], args: tuple[str, ...], says: str
) -> None:
    make_key("someone")  # the database exists (a missing one is refused first: test_newcomer_traps)
    assert says in error_of(cli(*args, ok=False))


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("keys", "create"), "Missing argument 'name'. (see 'dspark-gateway keys create --help')"),
        (("keys", "list", "--colour"), "No such option: --colour"),
        (("keys",), "Missing command."),
        (("usage", "--group-by", "week"), "Invalid value for '--group-by'"),
    ],
)
def test_usage_errors_are_one_line_with_status_2(cli: Cli, args: tuple[str, ...], says: str) -> None:
    assert says in error_of(cli(*args, ok=False), status=2)


def test_a_database_that_cannot_be_opened(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    url = f"sqlite+aiosqlite:///{tmp_path / 'file' / 'gw.db'}"
    error = error_of(cli("keys", "create", "x", "--database-url", url, ok=False))
    assert error.startswith(f"error: database {url}: FileExistsError: ")
    (tmp_path / "junk.db").write_bytes(b"\x00" * 4096)  # a file that is no SQLite database
    assert "file is not a database" in error_of(
        cli("audit", "--database-url", str(tmp_path / "junk.db"), ok=False)
    )


def test_debug_shows_the_traceback(cli: Cli, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    bad = ("keys", "create", "x", "--database-url", str(tmp_path / "file" / "gw.db"))
    for result in (cli("--debug", *bad, ok=False), cli(*bad, ok=False, DSPARK_DEBUG="1")):
        assert result.returncode == 1
        assert "Traceback (most recent call last)" in result.stderr and "FileExistsError" in result.stderr


def test_token_ttl_is_checked(cli: Cli) -> None:
    secret = "s" * 32
    assert "--ttl: invalid duration" in error_of(
        cli("token", "--ttl", "forever", ok=False, GATEWAY_JWT_SECRET=secret)
    )
    assert last_line(cli("token", "--ttl", "5m", GATEWAY_JWT_SECRET=secret)).count(".") == 2  # a JWT
    assert error_of(cli("token", ok=False)) == "error: GATEWAY_JWT_SECRET is not set"


def boom_app() -> typer.Typer:
    """An app with the CLI's own root options whose one command fails as nothing foresaw."""
    app = typer.Typer()
    app.callback()(root)

    @app.command()
    def boom() -> None:
        raise LookupError("nothing here\nsecond line")

    @app.command()
    def other() -> None:
        """A second command, so that `boom` is a subcommand."""

    return app


def test_an_unexpected_exception_is_its_type_and_message(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(boom_app(), ["boom"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: LookupError: nothing here (--debug shows the traceback)\n"
    with pytest.raises(LookupError):
        run(boom_app(), ["--debug", "boom"])
