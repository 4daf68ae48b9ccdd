"""Prompt counts outside the slots are bounded apart from them: a key's flood of ``count_tokens`` holds
at most its share of the backend's counts (the rest: 429 with ``Retry-After``), the backend never has
more than ``GATEWAY_COUNT_CONCURRENCY`` counts in flight, another key's chat is served meanwhile, and a
large request the queue has no room for is refused before its prompt is counted. A real gateway and
simulator (its tokenizer slowed to make counts overlap), the official Anthropic and OpenAI SDKs."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import anthropic
import httpx
import openai
import pytest

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"
#: ~5,000 tokens of prompt: a count of it takes the slowed tokenizer 0.25 s.
PROMPT = "word " * 5000


def test_a_count_flood_keeps_to_its_bound_and_leaves_the_backend_to_others(
    start_sim, start_gateway, make_key
) -> None:
    sim = start_sim(tokenize_tps=20_000)
    gateway = start_gateway(sim.url, slots=2, count_concurrency=2, count_concurrency_per_key=2)
    floods = [
        anthropic.Anthropic(base_url=gateway.url, api_key=make_key(f"flood-{n}"), max_retries=0)
        for n in range(2)
    ]
    other = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("other"), max_retries=0)
    refused: list[str | None] = []
    lock = threading.Lock()

    def count(i: int) -> int | None:
        try:
            return (
                floods[i % 2]
                .messages.count_tokens(model=MODEL, messages=[{"role": "user", "content": PROMPT}])
                .input_tokens
            )
        except anthropic.RateLimitError as error:
            with lock:
                refused.append(error.response.headers.get("retry-after"))
            return None

    with ThreadPoolExecutor(12) as pool:
        counted = pool.map(count, range(12))
        answer = other.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, timeout=30
        )
        counts = [c for c in counted if c is not None]
    assert answer.choices[0].finish_reason == "length"
    assert len(counts) >= 4 and all(c > 5000 for c in counts)
    assert refused and set(refused) == {"1"}  # past a key's two counts in flight
    assert scrape(sim.url)["dspark_sim_token_counts_peak"] == 2  # four may be in the gateway at once


def test_a_large_request_with_no_queue_room_is_refused_before_it_is_counted(
    start_sim, start_gateway, make_key
) -> None:
    sim = start_sim(decode_tps=50)
    gateway = start_gateway(sim.url, slots=1, queue_max=1, tokenize_min_bytes=1024)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("busy"), max_retries=0)
    long = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 400,
        "stream": True,
    }
    with httpx.Client(timeout=60) as http:
        headers = {"Authorization": f"Bearer {client.api_key}"}
        streams = [http.stream("POST", gateway.url + "/v1/chat/completions", json=long, headers=headers)]
        running = streams[0].__enter__()  # holds the slot
        streams.append(http.stream("POST", gateway.url + "/v1/chat/completions", json=long, headers=headers))
        queued = streams[1].__enter__()  # takes the one place in the queue
        try:
            wait_until(lambda: scrape(gateway.url)["gateway_queue_depth"] == 1, what="one waiting")
            before = scrape(sim.url)["dspark_sim_token_counts_total"]
            with pytest.raises(openai.RateLimitError) as full:
                client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": PROMPT}], max_tokens=4
                )
            assert full.value.code == "queue_full"
            assert scrape(sim.url)["dspark_sim_token_counts_total"] == before  # never counted
        finally:
            for response, stream in ((queued, streams[1]), (running, streams[0])):
                stream.__exit__(None, None, None)
                del response
