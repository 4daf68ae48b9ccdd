"""One convention across the command line: plain help, --json a flag that prints JSON on stdout,
show for every noun that has list, one --url (DSPARK_URL) with or without /v1 for every command
that talks to a gateway, tables that keep a row on one line, one line for a start-up failure, and a
run that imports only the command it runs."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator

import typer

from dspark_cli import command_line
from tests.cli.conftest import Cli, error_of

ROOT = typer.main.get_command(command_line(()))  # every command


def commands(command=ROOT, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], object]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from commands(sub, (*path, name))


def options(command) -> dict[str, object]:
    return {name: param for param in command.params for name in getattr(param, "opts", ())}


def test_help_is_plain_text() -> None:
    import click

    for path, command in commands():
        text = command.get_help(click.Context(command, info_name=" ".join(("dspark-gateway", *path))))
        for markup in ("``", "<bool>", ":class:", ":mod:", "[bold", "╭"):
            assert markup not in text, (path, markup)


def test_every_json_is_a_flag_every_list_has_a_show_and_every_remote_command_takes_url() -> None:
    talking = 0
    for path, command in commands():
        opts = options(command)
        if "--json" in opts:
            assert opts["--json"].is_flag, path  # never a file name
        subcommands = getattr(command, "commands", {})
        if "list" in subcommands:
            assert "show" in subcommands, path
        if "--url" in opts:
            talking += 1
            assert "DSPARK_URL" in (
                opts["--url"].envvar if isinstance(opts["--url"].envvar, list) else [opts["--url"].envvar]
            ), path
    assert talking >= 20  # the admin commands, bench and proof


def test_the_url_may_name_the_api_and_a_table_keeps_its_rows_whole(
    cli: Cli, start_sim, start_gateway, make_key
) -> None:
    gateway = start_gateway(start_sim().url)
    admin = make_key("root", scopes=["admin"])
    make_key("a-key-with-a-rather-long-name-that-a-narrow-table-would-fold")
    listed = cli("keys", "list", DSPARK_URL=gateway.url + "/v1", DSPARK_ADMIN_KEY=admin)
    assert f"note: using {gateway.url} " in listed.stderr  # said, and done
    row = next(line for line in listed.stdout.splitlines() if line.lstrip().startswith("a-key-with"))
    assert "a-key-with-a-rather-long-name-that-a-narrow-table-would-fold" in row
    shown = cli("groups", "create", "team", "--url", gateway.url, DSPARK_ADMIN_KEY=admin)
    assert shown.stdout == "Created group 'team'.\n"
    as_json = json.loads(
        cli("groups", "show", "team", "--json", "--url", gateway.url, DSPARK_ADMIN_KEY=admin).stdout
    )
    assert as_json["name"] == "team"
    updated = cli("keys", "update", "root", "--rpm", "5", "--url", gateway.url, DSPARK_ADMIN_KEY=admin)
    assert updated.stdout == "Updated key 'root': rpm.\n"
    rotated = cli("keys", "rotate", "root", "--grace", "0", "--url", gateway.url, DSPARK_ADMIN_KEY=admin)
    assert rotated.stdout.splitlines()[0] == "Rotated key 'root'; the old secret no longer works."
    admin = rotated.stdout.splitlines()[-1]
    audit = cli("audit", "--url", gateway.url, DSPARK_ADMIN_KEY=admin).stdout
    assert any(
        line.count(":") >= 2 and "key.update" in line for line in audit.splitlines()
    )  # its time on its row


def test_a_port_in_use_is_one_line(cli: Cli) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        failed = cli("serve", "--port", str(port), ok=False)
    assert error_of(failed) == (
        f"error: cannot listen on 127.0.0.1:{port}: another process listens there "
        "(choose another with --port or GATEWAY_PORT)"
    )


def test_a_revoked_key_is_not_rotated(cli: Cli) -> None:
    cli("keys", "create", "gone")
    cli("keys", "revoke", "gone")
    assert (
        error_of(cli("keys", "rotate", "gone", ok=False))
        == "error: key 'gone' is revoked: it gets no new secret"
    )


def test_an_address_without_its_scheme_is_one_clear_line(cli: Cli) -> None:
    refused = cli("keys", "list", "--url", "127.0.0.1:9", DSPARK_ADMIN_KEY="x", ok=False)
    assert error_of(refused) == "error: --url must start with http:// or https://, as http://127.0.0.1:9 does"


#: Modules only other commands need: the simulator, the qualifier, the runtime, the server, the app.
OTHERS = ("dspark_sim", "dspark_qualify", "dspark_runtime", "uvicorn", "gateway.app", "gateway.cli.reads")


def test_a_run_imports_only_the_command_it_runs() -> None:
    """``keys --help`` loads none of :data:`OTHERS` (importing them took most of a short run's time)."""
    probe = (
        "import sys\nfrom dspark_cli import main\ntry:\n    main(['keys', '--help'])\n"
        f"except SystemExit:\n    print([m for m in {OTHERS!r} if m in sys.modules])"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert run.stdout.splitlines()[-1] == "[]", run.stdout + run.stderr
    assert "Manage API keys" in run.stdout
