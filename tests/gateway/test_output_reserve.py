"""A request that sets no output cap is given one, ``GATEWAY_OUTPUT_RESERVE_TOKENS`` (64 here), spliced
into its body in each API and reserved of its quotas — so one member's uncapped request holds that of
its group's quota, not the whole of it; a stream whose backend generates past the cap it was sent is
cut there with an error event. Through a real gateway and the simulator, with the official SDKs; one
gateway serves the module (each test has keys and a group of its own)."""

from __future__ import annotations

import itertools
import json
import socket
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from dspark_sim import SimConfig
from tests.conftest import FAST_SIM
from tests.support.module_stack import served_with_admin
from tests.support.probes import wait_until
from tests.support.servers import ThreadedServer

MODEL = "deepseek-v4-flash-0731"
HI = [{"role": "user", "content": "hi"}]
RESERVE = 64  # below the simulator's ~144-token answer: an uncapped one is cut by it
_names = itertools.count()


class Stack:
    """The module's gateway and its admin key."""

    def __init__(self, gateway: ThreadedServer, admin_key: str) -> None:
        self.gateway = gateway
        self.admin = httpx.Client(base_url=gateway.url, headers={"Authorization": f"Bearer {admin_key}"})

    def call(self, method: str, path: str, status: int = 200, **body: Any) -> dict[str, Any]:
        answer = self.admin.request(method, path, json=body or None)
        assert answer.status_code == status, answer.text
        return answer.json()

    def key(self, **fields: Any) -> tuple[str, str]:
        """A new key with ``fields``: its name and secret."""
        name = f"reserve-{next(_names)}"
        return name, self.call("POST", "/admin/keys", 201, name=name, **fields)["key"]

    def client(self, key: str) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.url + "/v1", api_key=key, max_retries=0)

    def record(self, name: str) -> dict[str, Any]:
        """The ledger row of key ``name``'s request ({} until it is written)."""
        rows = self.call("GET", "/admin/requests")["data"]
        return next((row for row in rows if row["key_name"] == name), {})


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    with served_with_admin(
        tmp_path_factory.mktemp("output-reserve"),
        SimConfig(**FAST_SIM),
        slots=4,
        output_reserve_tokens=RESERVE,
    ) as served:
        yield Stack(*served)


def test_an_uncapped_request_is_cut_at_the_reserve_in_each_api(stack: Stack) -> None:
    client = stack.client(stack.key()[1])
    chat = client.chat.completions.create(model=MODEL, messages=HI)
    assert (chat.choices[0].finish_reason, chat.usage.completion_tokens) == ("length", RESERVE)
    streamed = list(
        client.chat.completions.create(
            model=MODEL, messages=HI, stream=True, stream_options={"include_usage": True}
        )
    )
    assert streamed[-1].usage.completion_tokens == RESERVE
    response = client.responses.create(model=MODEL, input="hi")
    assert (response.status, response.usage.output_tokens) == ("incomplete", RESERVE)
    text = client.completions.create(model=MODEL, prompt="hi")  # vLLM's own default: 16
    assert (text.choices[0].finish_reason, text.usage.completion_tokens) == ("length", 16)
    capped = client.chat.completions.create(model=MODEL, messages=HI, max_tokens=100)  # its own cap stands
    assert capped.usage.completion_tokens > RESERVE


def held_request(port: int, key: str) -> socket.socket:
    """An uncapped chat the simulator holds (before its first byte) until the socket is closed."""
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi #sim:stall=120"}]})
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: gateway\r\ncontent-type: application/json\r\n"
        + f"authorization: Bearer {key}\r\ncontent-length: {len(body)}\r\n\r\n{body}".encode()
    )
    return sock


def test_an_uncapped_request_holds_its_reserve_of_its_groups_quota_not_all_of_it(stack: Stack) -> None:
    team = f"team-{next(_names)}"
    stack.call("POST", "/admin/groups", 201, name=team, quota_tokens=2_000, quota_period="day")
    _, holder = stack.key(group=team)
    others = [stack.key(group=team)[1] for _ in range(3)]

    def quota() -> dict[str, Any]:
        [group] = own_quotas(stack, others[0])
        return group

    sock = held_request(stack.gateway.port, holder)
    try:
        wait_until(lambda: quota()["held"] > 0, timeout_s=60, what="the uncapped request's hold")
        held = quota()["held"]
        assert RESERVE < held <= RESERVE + 100  # its prompt's estimate and its output reserve
        assert quota()["used"] == 0 and quota()["remaining"] == 2_000 - held
        for key in others:  # each member is served while it runs
            answer = stack.client(key).chat.completions.create(model=MODEL, messages=HI, max_tokens=10)
            assert answer.choices[0].finish_reason == "length"
    finally:
        sock.close()
    wait_until(lambda: quota()["held"] == 0, timeout_s=60, what="every request settled")
    assert quota()["used"] > 0


def own_quotas(stack: Stack, key: str) -> list[dict[str, Any]]:
    answer = httpx.get(stack.gateway.url + "/v1/key", headers={"Authorization": f"Bearer {key}"})
    assert answer.status_code == 200, answer.text
    return answer.json()["quotas"]


def test_a_stream_past_the_cap_it_was_sent_is_cut_with_an_error_event(stack: Stack) -> None:
    """The backend ignores ``max_tokens`` 10: the stream stops at the chunk that passes it, with the
    error event in OpenAI's stream shape, and the ledger holds the tokens delivered."""
    name, key = stack.key()
    prompt = [{"role": "user", "content": "hi #sim:ignore_max_tokens=1"}]
    stream = stack.client(key).chat.completions.create(
        model=MODEL,
        messages=prompt,
        max_tokens=10,
        stream=True,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
    )
    delivered = 0
    with pytest.raises(openai.APIError) as cut:
        for chunk in stream:
            if chunk.usage is not None:
                delivered = chunk.usage.completion_tokens
    assert cut.value.code == "upstream_overran_cap"
    wait_until(lambda: stack.record(name).get("status") == 502, timeout_s=60, what="the ledger row")
    # up to the chunk that passed it (one engine step: 1 + K=5 drafts at most), whose text may have
    # gone out with the error event (the reasoning split holds a would-be marker back) with no usage
    recorded = stack.record(name)["completion_tokens"]
    assert 10 < recorded <= 10 + 6 and delivered <= recorded
