"""The freed slot goes to the waiter the fairness policy names, at once: two keys hold both slots and
queue more, a third key's request gets the first slot that frees (not the one after the two keys'
next requests). A real gateway and simulator; the order is read from the simulator's sequence trace."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"


def test_a_third_key_gets_the_first_freed_slot(start_sim, start_gateway, make_key, tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(slots=2, decode_tps=200, trace_file=str(trace))
    gateway = start_gateway(sim.url, slots=2)
    keys = {name: make_key(name) for name in "ABC"}
    threads: list[threading.Thread] = []

    def send(key: str, max_tokens: int) -> None:
        body = {"model": MODEL, "messages": [{"role": "user", "content": "count from 1 to 900"}],
                "max_tokens": max_tokens, "stream": True}  # fmt: skip
        headers = {"Authorization": f"Bearer {keys[key]}"}

        def run() -> None:
            with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers,
                              timeout=60) as response:  # fmt: skip
                assert response.status_code == 200
                response.read()

        threads.append(threading.Thread(target=run))
        threads[-1].start()

    def waiting(n: int) -> bool:
        return scrape(gateway.url)["gateway_queue_depth"] == n

    send("A", 200)  # output tokens tell the sequences apart in the trace
    send("B", 260)
    wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 2, what="A and B running")
    send("A", 201)
    wait_until(lambda: waiting(1), what="A's second waiting")
    send("B", 202)
    wait_until(lambda: waiting(2), what="B's second waiting")
    send("C", 20)
    wait_until(lambda: waiting(3), what="C waiting")
    for thread in threads:
        thread.join(60)
    wait_until(lambda: trace.exists() and len(trace.read_text().splitlines()) == 5, what="5 traced")
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    by_tokens = {line["output_tokens"]: line for line in lines}
    first_freed = by_tokens[200]["finish"]  # A's first request ends before B's
    assert by_tokens[20]["scheduled"] >= first_freed
    assert by_tokens[20]["scheduled"] < by_tokens[201]["scheduled"] < by_tokens[202]["scheduled"]
