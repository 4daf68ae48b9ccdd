"""Request classes: ``x-priority: batch`` (or a batch key) waits behind interactive requests, never
above what its key allows, and reaches vLLM as ``priority`` 1 when the runtime schedules by priority
(``GATEWAY_UPSTREAM_PRIORITY``; the simulator as ``--scheduling-policy priority``); a bad class is a
400 in the client's shape. A real gateway and simulator, the official OpenAI SDK, the order read from
the simulator's sequence trace."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import openai
import pytest

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"


def ask(client: openai.OpenAI, max_tokens: int, priority: str | None = None) -> threading.Thread:
    """A chat in a thread of its own; its ``max_tokens`` tells it apart in the trace."""
    headers = {"x-priority": priority} if priority else {}
    thread = threading.Thread(
        target=lambda: client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "count from 1 to 500"}],
            max_tokens=max_tokens, extra_headers=headers, timeout=60,
        )
    )  # fmt: skip
    thread.start()
    return thread


def test_batch_waits_behind_interactive_and_reaches_vllm_as_priority(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(slots=1, decode_tps=50, scheduling_policy="priority", trace_file=str(trace))
    # no session holds: the order asserted is the classes', not a held agent turn's
    gateway = start_gateway(sim.url, slots=1, upstream_priority=True, session_hold_s=0)

    def client(name: str, **key: object) -> openai.OpenAI:
        return openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key(name, **key), max_retries=0)

    background, nightly = client("background"), client("nightly", request_class="batch")
    agent = client("agent")
    # the slot is held by a stream that runs until it is closed (a minute of tokens), once all three wait:
    # their order is the classes', however long the queueing takes on a busy machine
    holder = client("holder").chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "count from 1 to 5000"}], max_tokens=3000,
        stream=True, timeout=60,
    )  # fmt: skip
    next(iter(holder))
    wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 1, what="the slot held")
    threads = [ask(background, 11, "batch")]
    wait_until(lambda: scrape(gateway.url)["gateway_queue_depth"] == 1, what="the batch request waiting")
    # a batch key asking for interactive stays batch
    threads.append(ask(nightly, 12, "interactive"))
    wait_until(lambda: scrape(gateway.url)["gateway_queue_depth"] == 2, what="two batch waiting")
    threads.append(ask(agent, 13))
    wait_until(lambda: scrape(gateway.url)["gateway_queue_depth"] == 3, what="three waiting")
    holder.close()  # the slot goes to the waiting requests, in their order
    for thread in threads:
        thread.join(60)
    wait_until(lambda: trace.exists() and len(trace.read_text().splitlines()) == 4, what="4 traced")
    traced = [json.loads(line) for line in trace.read_text().splitlines()]
    [held] = [line for line in traced if line["reason"] == "abort"]
    lines = {line["output_tokens"]: line for line in traced if line is not held}
    order = sorted((11, 12, 13), key=lambda tokens: lines[tokens]["scheduled"])
    assert order == [13, 11, 12]  # the interactive one first, then the batch ones in their turns
    assert held["priority"] == 0
    assert {tokens: lines[tokens]["priority"] for tokens in (11, 12, 13)} == {11: 1, 12: 1, 13: 0}


def test_without_priority_scheduling_a_batch_request_sends_none(start_sim, start_gateway, make_key) -> None:
    gateway = start_gateway(start_sim().url)  # the simulator as vLLM with fcfs: priority 1 would be a 400
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("batch"), max_retries=0)
    answer = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        extra_headers={"x-priority": "batch"},
    )  # fmt: skip
    assert answer.choices[0].finish_reason == "length"
    with pytest.raises(openai.BadRequestError) as bad:
        client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], extra_headers={"x-priority": "urgent"}
        )
    assert bad.value.code == "invalid_value" and bad.value.param == "x-priority"
