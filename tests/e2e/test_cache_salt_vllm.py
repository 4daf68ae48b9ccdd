"""Tenants isolated in a REAL vLLM's prefix cache (CPU build, tiny model, prefix caching on, KV events on
ZMQ as the runtime profile has them): the gateway salts each request with its group's ``cache_salt``,
so a prompt one group sent is computed again for another group (``cached_tokens`` 0 from vLLM) while a
second key of the sender's group reuses it; the cached tokens the gateway predicted from vLLM's own
(salted) events equal what vLLM reports, on every request.

One vLLM for the module, its pool of :data:`POOL_BLOCKS` blocks of :data:`BLOCK` tokens large enough that
nothing is evicted; ``--enable-prompt-tokens-details`` makes vLLM report ``cached_tokens``.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.probes import wait_until
from tests.support.servers import free_port
from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer

BLOCK = 32
POOL_BLOCKS = 64
SYSTEM = "You are a careful assistant; the launch code is 4831. " * 6


@pytest.fixture(scope="module")
def events() -> tuple[str, str]:
    return f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def vllm_with_events(vllm_factory, events) -> VLLMServer:
    publish, replay = events
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": publish,  # vLLM connects to the gateway, which binds it on loopback
        "replay_endpoint": replay,
    }
    return vllm_factory(
        [
            "--enable-prefix-caching",
            "--block-size", str(BLOCK),
            "--num-gpu-blocks-override", str(POOL_BLOCKS),
            "--enable-prompt-tokens-details",
            "--kv-events-config", json.dumps(config),
        ]
    )  # fmt: skip


def test_another_group_gets_nothing_of_a_prompt_from_vllms_cache_and_the_senders_group_gets_it(
    vllm_with_events: VLLMServer, events, start_gateway, make_key
) -> None:
    publish, replay = events
    gateway = start_gateway(
        vllm_with_events.base_url, served_model=TINY_MODEL_NAME, slots=2, tokenize_min_bytes=0,
        kv_events=publish, kv_events_replay=replay, kv_events_bind=True, kv_block_size=BLOCK,
        kv_budget_tokens=BLOCK * POOL_BLOCKS, long_prompt_tokens=10_000,
    )  # fmt: skip
    admin = make_key("admin", scopes=["admin"])
    headers = {"Authorization": f"Bearer {admin}"}
    for group in ("red", "blue"):
        assert (
            httpx.post(gateway.url + "/admin/groups", json={"name": group}, headers=headers).status_code
            == 201
        )
    red_a, red_b = make_key("red-a", group="red"), make_key("red-b", group="red")
    blue = make_key("blue-a", group="blue")

    def feed() -> dict:
        status = httpx.get(gateway.url + "/admin/status", headers=headers).json()
        return status["backends"][0]["prefix_cache"]["events"]

    def ask(key: str, computes: bool) -> dict:
        """One chat turn with :data:`SYSTEM`; its ledger row, and when it ``computes`` its prompt's
        blocks, once their events have come (the next turn is predicted from them)."""
        batches = feed()["batches"]
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What is the code?"}]
        body = {"model": TINY_MODEL_NAME, "messages": messages, "max_tokens": 4, "temperature": 0}
        answer = httpx.post(
            gateway.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        request_id = answer.headers["x-request-id"]

        def row() -> dict | None:
            rows = httpx.get(gateway.url + "/admin/requests", headers=headers).json()["data"]
            return next((r for r in rows if r["request_id"] == request_id), None)

        wait_until(lambda: row() is not None, what="its row")
        found = row()
        assert found is not None
        assert found["cached_tokens"] == answer.json()["usage"]["prompt_tokens_details"]["cached_tokens"]
        if computes:
            wait_until(lambda: feed()["batches"] > batches, what="the events of its blocks")
        return found

    first = ask(red_a, computes=True)
    assert first["cached_tokens"] == 0 and first["prompt_tokens"] > 4 * BLOCK
    other = ask(blue, computes=True)
    same = ask(red_b, computes=False)
    assert other["cache_source"] == same["cache_source"] == "events"
    assert other["cached_tokens"] == other["cached_tokens_predicted"] == 0  # nothing of red's reaches blue
    assert same["cached_tokens"] == same["cached_tokens_predicted"] >= first["prompt_tokens"] - BLOCK
    assert feed()["bad_messages"] == 0 and feed()["orphans"] == 0
