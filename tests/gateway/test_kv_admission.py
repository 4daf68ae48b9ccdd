"""KV-aware admission through a real gateway and simulator: prompts sized by the backend's own
``/tokenize``, two prompts that can't share the KV pool never run at once, the express lane keeps a
slot for short requests, and what each request waited for reaches its ledger row.

The simulator's sequence trace (``scheduled`` .. ``finish`` per sequence, its monotonic clock) shows
what ran together; its ``vllm:num_preemptions_total`` that nothing had to be preempted.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import httpx
import openai
import pytest

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"
#: ~24,000 simulated tokens (the simulator counts ~4 characters a token).
LONG_TEXT = "lorem ipsum dolor sit amet " * 3_560
#: As long, and sharing no prefix cache block with it (its first token differs).
OTHER_LONG_TEXT = LONG_TEXT.replace("lorem", "Lorem", 1)
#: A slow enough backend that a long request is still running when the next ones arrive.
SIM = {"prefill_tps": 20_000.0, "decode_tps": 100.0, "ttft_base_s": 0.0}


def chat(text: str, max_tokens: int, stream: bool = False) -> dict:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}
    return {**body, "stream": stream, "ignore_eos": True}


def trace(path: Path, count: int) -> list[dict]:
    wait_until(lambda: path.exists() and len(path.read_text().splitlines()) >= count, what="trace lines")
    return [json.loads(line) for line in path.read_text().splitlines()]


def overlap(a: dict, b: dict) -> bool:
    return a["scheduled"] < b["finish"] and b["scheduled"] < a["finish"]


def rows(gateway, admin: str, key: str) -> list[dict]:
    data = httpx.get(gateway.url + "/admin/requests", headers={"Authorization": f"Bearer {admin}"}).json()
    return [row for row in data["data"] if row["key_name"] == key]


def status(gateway, admin: str) -> dict:
    return httpx.get(gateway.url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}).json()


def run_two_long_and_a_short(gateway, admin: str, keys: dict[str, str], reason: str) -> None:
    """A long stream, a second one that must wait (for ``reason``), then a short chat: the short one
    is answered while the first long one still runs."""
    post = gateway.url + "/v1/chat/completions"
    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(
            httpx.post,
            post,
            json=chat(LONG_TEXT, 200),
            headers={"Authorization": f"Bearer {keys['a']}"},
            timeout=60,
        )
        wait_until(lambda: status(gateway, admin)["slots_in_use"] == 1, what="the first long one admitted")
        second = pool.submit(
            httpx.post,
            post,
            json=chat(OTHER_LONG_TEXT, 200),
            headers={"Authorization": f"Bearer {keys['b']}"},
            timeout=60,
        )
        wait_until(
            lambda: status(gateway, admin)["waiting_for"][reason] == 1,
            what=f"the second waiting for {reason}",
        )
        short = openai.OpenAI(base_url=gateway.url + "/v1", api_key=keys["c"], max_retries=0)
        answer = short.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
        assert answer.choices[0].finish_reason and not first.done()  # served beside the first long one
        assert first.result().status_code == 200 and second.result().status_code == 200


@pytest.fixture
def keys(make_key) -> dict[str, str]:
    return {name: make_key(name) for name in ("a", "b", "c")} | {"admin": make_key("admin", scopes=["admin"])}


def test_two_prompts_that_do_not_fit_the_pool_together_run_one_after_the_other(
    start_sim, start_gateway, keys, tmp_path: Path
) -> None:
    path = tmp_path / "trace.jsonl"
    sim = start_sim(**SIM, kv_cache_tokens=40_000, trace_file=str(path))
    gateway = start_gateway(sim.url, slots=2, kv_budget_tokens=40_000, long_prompt_tokens=100_000)
    run_two_long_and_a_short(gateway, keys["admin"], keys, "kv")
    a, b, c = _by_size(trace(path, 3))
    assert not overlap(a, b) and overlap(a, c)  # the short one ran beside the first long one
    assert scrape(sim.url)["vllm:num_preemptions_total"] == 0
    wait_until(lambda: len(rows(gateway, keys["admin"], "b")) == 1, what="ledger rows")
    [first], [second], [short] = (rows(gateway, keys["admin"], k) for k in "abc")
    assert first["prompt_size_source"] == second["prompt_size_source"] == "tokenize"
    assert first["prompt_size_tokens"] == first["prompt_tokens"] > 20_000
    assert first["kv_tokens"] == first["prompt_tokens"] + 200 and first["lane"] == "short"
    assert set(second["waited_for"]) <= {"kv", "slot"} and second["waited_for"]["kv"] > 0
    assert short["waited_for"] == {} and short["prompt_size_source"] == "estimate"
    assert status(gateway, keys["admin"])["kv_reserved_tokens"] == 0


def _by_size(lines: list[dict]) -> tuple[dict, dict, dict]:
    """The trace's two long sequences in the order they ran, then the short one."""
    long = sorted(
        (line for line in lines if line["prompt_tokens"] > 20_000), key=lambda line: line["scheduled"]
    )
    [short] = [line for line in lines if line["prompt_tokens"] < 1_000]
    return long[0], long[1], short


def test_the_express_lane_keeps_the_other_slot_for_short_requests(
    start_sim, start_gateway, keys, tmp_path: Path
) -> None:
    path = tmp_path / "trace.jsonl"
    sim = start_sim(**SIM, trace_file=str(path))
    gateway = start_gateway(sim.url, slots=2, long_prompt_tokens=10_000)
    run_two_long_and_a_short(gateway, keys["admin"], keys, "lane")
    a, b, c = _by_size(trace(path, 3))
    assert not overlap(a, b) and overlap(a, c)
    wait_until(lambda: len(rows(gateway, keys["admin"], "b")) == 1, what="ledger rows")
    [second] = rows(gateway, keys["admin"], "b")
    assert second["lane"] == "long" and second["waited_for"]["lane"] > 0


def test_without_a_tokenizer_route_prompts_are_estimated(start_sim, start_gateway, keys) -> None:
    sim = start_sim(tokenize_route=False)
    gateway = start_gateway(sim.url)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=keys["a"], max_retries=0)
    for _ in range(2):  # the second is not asked for: the gateway learnt the route is missing
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": LONG_TEXT}], max_tokens=4
        )
    wait_until(lambda: len(rows(gateway, keys["admin"], "a")) == 2, what="ledger rows")
    assert {row["prompt_size_source"] for row in rows(gateway, keys["admin"], "a")} == {"estimate"}
    assert status(gateway, keys["admin"])["upstream"]["counts_prompts"] is False


def test_a_request_no_pool_could_hold_is_refused_in_its_dialect(start_sim, start_gateway, keys) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url, kv_budget_tokens=30_000)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=keys["a"], max_retries=0)
    with pytest.raises(openai.BadRequestError) as raised:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": LONG_TEXT}], max_tokens=8000
        )
    assert raised.value.code == "context_length_exceeded" and "KV cache" in raised.value.message
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=keys["a"], max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(
            model=MODEL, messages=[{"role": "user", "content": LONG_TEXT}], max_tokens=8000
        )
    assert refused.value.body["error"]["type"] == "invalid_request_error"
    assert scrape(sim.url).get("vllm:prompt_tokens_total", 0) == 0  # nothing reached the engine
