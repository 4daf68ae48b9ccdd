"""A key's model aliases set by the CLI, locally on the database and through the admin API, then used
by the OpenAI SDK through a real gateway in front of the simulator."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx
import openai

from tests.cli.conftest import MODEL, Cli
from tests.support.servers import ThreadedServer

ASK = [{"role": "user", "content": "Count to 2."}]


def _client(gateway: ThreadedServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)


def test_aliases_from_the_local_cli_and_the_admin_api_route_requests(
    cli: Cli, start_sim: Callable[..., ThreadedServer], start_gateway: Callable[..., ThreadedServer],
    make_key: Callable[..., str],
) -> None:  # fmt: skip
    gateway = start_gateway(start_sim().url)
    local = cli("keys", "create", "team", "--alias", "team-model=" + MODEL, "--alias", "x = y")
    secret = local.stdout.strip().splitlines()[-1]
    shown = json.loads(cli("keys", "show", "team", "--json").stdout)
    assert shown["aliases"] == {"team-model": MODEL, "x": "y"}
    assert _client(gateway, secret).chat.completions.create(model="team-model", messages=ASK).model == MODEL

    admin = make_key("root", scopes=["admin"])
    remote = cli(
        "keys",
        "update",
        "team",
        "--alias",
        "other=" + MODEL,
        "--url",
        gateway.url,
        "--admin-key",
        admin,
        "--json",
    )
    assert json.loads(remote.stdout)["aliases"] == {"other": MODEL}  # the map is replaced
    audit = httpx.get(gateway.url + "/admin/audit", headers={"Authorization": f"Bearer {admin}"}).json()
    updates = [row for row in audit["data"] if row["action"] == "key.update"]
    assert updates and updates[0]["detail"]["changes"]["aliases"] == {
        "from": {"team-model": MODEL, "x": "y"},
        "to": {"other": MODEL},
    }
    assert [m.id for m in _client(gateway, secret).models.list()] == [MODEL, "other"]

    cleared = cli("keys", "update", "team", "--no-aliases", "--json")
    assert json.loads(cleared.stdout)["aliases"] is None

    for bad in (["--alias", "nomodel"], ["--alias", "=m"], ["--alias", "a=b", "--no-aliases"]):
        refused = cli("keys", "update", "team", *bad, ok=False)
        assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
        assert "alias" in refused.stderr
    too_many = [arg for n in range(65) for arg in ("--alias", f"a{n}={MODEL}")]
    refused = cli("keys", "update", "team", *too_many, "--url", gateway.url, "--admin-key", admin, ok=False)
    assert refused.returncode == 1 and "64" in refused.stderr, refused.stderr
