"""What a newcomer's first hour tripped over, each now refused or made possible: a mistyped database
path, two places to act on at once, an allow-list of no model, rotating with no grace, granting a
scope, and the version. Real `dspark-gateway` processes; the keys used by the OpenAI SDK through a
real gateway in front of the simulator."""

from __future__ import annotations

import json
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path

import openai
import pytest

from tests.cli.conftest import MODEL, Cli, error_of, last_line
from tests.support.probes import wait_until
from tests.support.servers import ThreadedServer

ASK = [{"role": "user", "content": "Count to 2."}]


def answers(client: openai.OpenAI) -> bool:
    """Whether ``client``'s key may ask for the served model now (refused: 401 or 403)."""
    try:
        return client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5).model == MODEL
    except (openai.AuthenticationError, openai.PermissionDeniedError):
        return False


def test_a_mistyped_database_path_is_refused_not_created(cli: Cli, tmp_path: Path) -> None:
    typo = tmp_path / "no-such-dir" / "gw.db"
    for command in (["keys", "list"], ["usage"], ["audit"], ["requests"], ["keys", "show", "x"]):
        line = error_of(cli(*command, "--database-url", str(typo), ok=False))
        assert line == f"error: no database at {typo}: check --database-url / GATEWAY_DATABASE_URL " + (
            "(serve and keys create make a new one)"
        ), command
    assert not typo.parent.exists()
    cli("keys", "create", "first", "--database-url", str(typo))  # making a key may make the database
    assert typo.exists()
    assert [
        k["name"] for k in json.loads(cli("keys", "list", "--json", "--database-url", str(typo)).stdout)
    ] == ["first"]


def test_url_and_database_url_together_are_refused(cli: Cli, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    for command in (["keys", "create", "x"], ["keys", "list"], ["audit"], ["usage"]):
        line = error_of(cli(*command, "--url", "http://127.0.0.1:1", "--database-url", str(other), ok=False))
        assert line == "error: --url and --database-url name two places to act on: give one"
    assert not other.exists()


def test_models_all_grace_zero_and_scopes(
    cli: Cli, start_sim: Callable[..., ThreadedServer], start_gateway: Callable[..., ThreadedServer]
) -> None:
    gateway = start_gateway(start_sim().url)
    secret = last_line(cli("keys", "create", "team", "--models", "elsewhere"))
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=secret, max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5)
    assert json.loads(cli("keys", "update", "team", "--models", "all", "--json").stdout)["models"] is None
    wait_until(lambda: answers(client), timeout_s=10, what="every model allowed (key cache TTL)")
    for empty in ("", " , "):
        line = error_of(cli("keys", "update", "team", "--models", empty, ok=False))
        assert line == "error: --models: give model names separated by commas, or all"
    assert "(all)" in cli("keys", "list", COLUMNS="100").stdout

    rotated = last_line(cli("keys", "rotate", "team", "--grace", "0"))
    wait_until(lambda: not answers(client), timeout_s=10, what="no grace: the old secret refused")
    with pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5)
    fresh = openai.OpenAI(base_url=gateway.url + "/v1", api_key=rotated, max_retries=0)
    assert fresh.chat.completions.create(model=MODEL, messages=ASK, max_tokens=5).model == MODEL

    cli("keys", "create", "tuner", "--scope", "backend_fields")
    assert json.loads(cli("keys", "show", "tuner", "--json").stdout)["scopes"] == ["backend_fields"]
    error_of(cli("keys", "create", "bad", "--scope", "root", ok=False))


def test_version(cli: Cli) -> None:
    assert cli("--version").stdout == f"dspark-gateway {version('dspark-gateway')}\n"
