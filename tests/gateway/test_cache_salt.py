"""Tenants never read each other through the prefix cache, through a real gateway and simulator: every
request carries its group's ``cache_salt``, so a prompt another group sent is computed again
(``cached_tokens`` 0 on chat, no ``cache_read_input_tokens`` on Messages) while a second key of the
sender's group reuses it, and groups whose ``prefix_cache`` is ``shared`` share with each other. The
gateway's prediction (from the simulator's KV events, salted as vLLM salts) equals what the simulator
reports. ``GET /v1/key`` says whose prefixes a key shares; the setting is audited."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.support.probes import wait_until
from tests.support.servers import free_port

MODEL = "deepseek-v4-flash-0731"
BLOCK = 16
#: A long system prompt (~1,000 simulated tokens: many blocks) with a secret in its first block.
SYSTEM = "the launch code is 4831. " + "follow the runbook step by step and report. " * 120
SIZED = {"tokenize_min_bytes": 1, "kv_block_size": BLOCK}


class Stack:
    """A simulator publishing KV events, a gateway subscribed to them, an admin client, keys by name."""

    def __init__(self, start_sim, start_gateway, make_key) -> None:
        events, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
        sim = start_sim(block_size=BLOCK, kv_events_endpoint=events, kv_events_replay_endpoint=replay)
        self.gateway = start_gateway(sim.url, kv_events=events, kv_events_replay=replay, **SIZED)
        self.admin_key = make_key("ops", scopes=["admin"])
        self.http = httpx.Client(
            base_url=self.gateway.url, headers={"Authorization": f"Bearer {self.admin_key}"}
        )
        self.make_key = make_key

    def admin(self, method: str, path: str, status: int = 200, **body) -> dict:
        answer = self.http.request(method, path, json=body or None)
        assert answer.status_code == status, answer.text
        return answer.json()

    def group(self, name: str, **fields) -> dict:
        return self.admin("POST", "/admin/groups", 201, name=name, **fields)

    def row(self, request_id: str) -> dict:
        """The ledger row of ``request_id``, once written."""

        def found() -> dict | None:
            rows = self.admin("GET", "/admin/requests")["data"]
            return next((r for r in rows if r["request_id"] == request_id), None)

        wait_until(lambda: found() is not None, what="its ledger row")
        row = found()
        assert row is not None
        return row

    def chat(self, key: str) -> tuple[int, dict]:
        """One chat turn with :data:`SYSTEM`: the ``cached_tokens`` the client saw, its ledger row."""
        client = openai.OpenAI(base_url=self.gateway.url + "/v1", api_key=key, max_retries=0)
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": "status?"}],
            max_tokens=4,
        )
        answer = raw.parse()
        assert answer.usage is not None and answer.usage.prompt_tokens_details is not None
        return answer.usage.prompt_tokens_details.cached_tokens or 0, self.row(raw.headers["x-request-id"])

    def messages(self, key: str) -> tuple[int, dict]:
        """One Messages turn with another system prompt than :meth:`chat`'s (the two render alike):
        ``cache_read_input_tokens`` (0 when absent), its ledger row."""
        client = anthropic.Anthropic(base_url=self.gateway.url, api_key=key, max_retries=0)
        raw = client.messages.with_raw_response.create(
            model=MODEL,
            system="as an Anthropic client: " + SYSTEM,
            messages=[{"role": "user", "content": "report"}],
            max_tokens=4,
        )
        return raw.parse().usage.cache_read_input_tokens or 0, self.row(raw.headers["x-request-id"])

    def wait_for_events(self) -> None:
        """Until the gateway's prefix cache view is fed by the simulator's events."""

        def source() -> str:
            return self.admin("GET", "/admin/status")["backends"][0]["prefix_cache"]["source"]

        wait_until(lambda: source() == "events", what="KV events")


@pytest.fixture
def stack(start_sim, start_gateway, make_key) -> Stack:
    return Stack(start_sim, start_gateway, make_key)


def exact(row: dict) -> int:
    """The row's reported ``cached_tokens``, once checked equal to what the gateway predicted."""
    assert row["cache_source"] == "events", row
    assert row["cached_tokens_predicted"] == row["cached_tokens"], row
    return row["cached_tokens"]


def test_another_group_computes_a_prompt_again_and_the_senders_group_reuses_it(stack: Stack) -> None:
    for name in ("red", "blue"):
        stack.group(name)
    red_a, red_b = stack.make_key("red-a", group="red"), stack.make_key("red-b", group="red")
    blue, solo = stack.make_key("blue-a", group="blue"), stack.make_key("solo")

    seen, row = stack.chat(red_a)
    assert seen == 0 and row["prompt_tokens"] > 20 * BLOCK
    stack.wait_for_events()
    for outsider in (blue, solo):
        seen, row = stack.chat(outsider)
        assert seen == 0 and exact(row) == 0  # blocks of red's salt: no hit, none predicted
    seen, row = stack.chat(red_b)
    assert seen == exact(row) >= row["prompt_tokens"] - BLOCK  # the whole prompt but its last block

    # Anthropic Messages (vLLM's /v1/messages forwards cache_salt to its chat request)
    read, row = stack.messages(red_a)
    assert read == 0
    read, row = stack.messages(blue)
    assert read == 0 and row["cached_tokens_predicted"] in (0, None)
    read, row = stack.messages(red_b)
    assert read > 0 and read == row["cached_tokens"]
    assert row["cached_tokens_predicted"] in (read, None)


def test_groups_that_share_their_prefix_cache_share_it_with_each_other_only(stack: Stack) -> None:
    one = stack.group("one", prefix_cache="shared")
    assert one["prefix_cache"] == "shared"
    stack.group("two")
    assert stack.admin("PATCH", "/admin/groups/two", prefix_cache="shared")["prefix_cache"] == "shared"
    stack.group("own")
    first, second = stack.make_key("one-a", group="one"), stack.make_key("two-a", group="two")
    own = stack.make_key("own-a", group="own")

    seen, _ = stack.chat(first)
    assert seen == 0
    stack.wait_for_events()
    seen, row = stack.chat(second)
    assert seen == exact(row) > 0
    seen, row = stack.chat(own)
    assert seen == exact(row) == 0

    audit = stack.admin("GET", "/admin/audit")["data"]
    [update] = [row for row in audit if row["action"] == "group.update"]
    assert update["detail"]["changes"] == {"prefix_cache": {"from": "group", "to": "shared"}}


def test_a_key_is_told_whose_cached_prefixes_it_shares(stack: Stack) -> None:
    stack.group("team")
    stack.group("commons", prefix_cache="shared")
    told = {}
    for name, group in (("member", "team"), ("commoner", "commons"), ("loner", None)):
        key = stack.make_key(name, group=group) if group else stack.make_key(name)
        answer = httpx.get(stack.gateway.url + "/v1/key", headers={"Authorization": f"Bearer {key}"})
        told[name] = answer.json()["prefix_cache"]["scope"]
    assert told == {"member": "group team", "commoner": "shared", "loner": "key"}
    refused = stack.admin("PATCH", "/admin/groups/team", 400, prefix_cache="everyone")
    assert refused["error"]["param"] == "prefix_cache"
