"""The gateway's prediction of a REAL vLLM's prefix cache (CPU build, tiny model, prefix caching on,
KV events published on ZMQ with a replay socket, all on loopback as the runtime profile has them:
vLLM connects its publisher to the gateway's bound socket and binds its replay socket): over a
scripted multi-turn conversation, with an eviction forced by a long unrelated prompt on a pool of a
few blocks, the cached tokens the gateway predicted from vLLM's own events match the
``cached_tokens`` vLLM reports on every turn, within one block.

Each request asks for one token, so it is one engine step, which publishes one batch of events when it
stored a block (or evicted one); before the next turn, the gateway must have received every batch the
turns so far stored blocks in — vLLM publishes them from a thread of its own, and on a loaded machine
the answer can arrive first (the next turn was then predicted without the last one's blocks).

The pool is shrunk to :data:`POOL_BLOCKS` blocks of :data:`BLOCK` tokens (``--num-gpu-blocks-override``,
the least vLLM accepts for its 512-token context) so that a prompt of nearly 512 tokens evicts what
came before it; ``--enable-prompt-tokens-details`` makes vLLM report ``cached_tokens``.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.support.probes import wait_until
from tests.support.servers import free_port
from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer

BLOCK = 32
POOL_BLOCKS = 17


@pytest.fixture(scope="module")
def events() -> tuple[str, str]:
    return f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"


@pytest.fixture(scope="module")
def vllm_with_events(vllm_factory, events) -> VLLMServer:
    publish, replay = events
    config = {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": publish,  # no wildcard: vLLM connects to the gateway, which binds it on loopback
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


def test_predicted_cached_tokens_match_what_vllm_reports_on_every_turn(
    vllm_with_events: VLLMServer, events, start_gateway, make_key
) -> None:
    publish, replay = events
    gateway = start_gateway(
        vllm_with_events.base_url, served_model=TINY_MODEL_NAME, slots=2, tokenize_min_bytes=0,
        kv_events=publish, kv_events_replay=replay, kv_events_bind=True, kv_block_size=BLOCK,
        kv_budget_tokens=BLOCK * POOL_BLOCKS,
        long_prompt_tokens=10_000,
    )  # fmt: skip
    key, admin = make_key("agent"), make_key("admin", scopes=["admin"])

    def feed() -> dict:
        auth = {"Authorization": f"Bearer {admin}"}
        status = httpx.get(gateway.url + "/admin/status", headers=auth, timeout=60).json()
        return status["backends"][0]["prefix_cache"]["events"]

    storing = [feed()["batches"]]  # the batches before the first turn, then one per turn that stored blocks

    def ask(messages: list[dict]) -> dict:
        body = {"model": TINY_MODEL_NAME, "messages": messages, "max_tokens": 1, "temperature": 0}
        answer = httpx.post(
            gateway.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"},
            timeout=120,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        request_id = answer.headers["x-request-id"]

        def row() -> dict | None:
            rows = httpx.get(
                gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"}, timeout=60
            )
            return next((r for r in rows.json()["data"] if r["request_id"] == request_id), None)

        wait_until(lambda: row() is not None, what="its row")
        found = row()
        assert found is not None
        usage = answer.json()["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        assert found["cached_tokens"] == cached
        # the events of this turn's blocks have come: the next turn is predicted from them
        storing.append(int(usage["prompt_tokens"] // BLOCK > cached // BLOCK))
        wait_until(lambda: feed()["batches"] >= sum(storing), what="this turn's events")
        return found

    counted = httpx.post(
        vllm_with_events.base_url + "/tokenize",
        json={"model": TINY_MODEL_NAME, "messages": [{"role": "user", "content": "filler " * 100}]},
        timeout=60,
    ).json()["count"]
    unrelated = [{"role": "user", "content": "filler " * (100 * 440 // counted)}]  # ~440 tokens
    conversation = [{"role": "system", "content": "You are a careful assistant. " * 8}]
    turns = []
    for step in range(4):
        conversation.append({"role": "user", "content": f"Question {step}: what comes next in the plan?"})
        if step == 3:  # a long unrelated prompt first: it evicts the least recently used blocks
            ask(unrelated)
        turns.append(ask(conversation))
        conversation.append({"role": "assistant", "content": f"Step {step} is done."})
    assert all(t["cache_source"] == "events" for t in turns[1:]), turns
    for turn in turns:
        assert abs(turn["cached_tokens_predicted"] - turn["cached_tokens"]) <= BLOCK, turn
    assert turns[1]["cached_tokens"] > 0 and turns[2]["cached_tokens"] > turns[1]["cached_tokens"]
    assert turns[3]["cached_tokens"] < turns[2]["cached_tokens"]  # the eviction took some of it
    assert feed()["bad_messages"] == 0 and feed()["orphans"] == 0
