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
#: The requests in the order of their prompts' lengths.
ORDER = ("A1", "B1", "A2", "B2", "C1")


def test_a_third_key_gets_the_first_freed_slot(start_sim, start_gateway, make_key, tmp_path: Path) -> None:
    """A and B hold both slots with streams the test ends itself (so no slot frees by the clock), A and B
    queue one more each, then C; ending A's stream frees the first slot: C's, not A's next."""
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(slots=2, decode_tps=200, trace_file=str(trace))
    gateway = start_gateway(sim.url, slots=2)
    keys = {name: make_key(name) for name in "ABC"}
    threads: list[threading.Thread] = []
    ended = {name: threading.Event() for name in ("A1", "B1")}

    def send(key: str, request_id: str, max_tokens: int) -> None:
        content = "count from 1 to 900" + " again" * 2 * ORDER.index(request_id)  # told apart in the trace
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens, "stream": True}  # fmt: skip
        headers = {"Authorization": f"Bearer {keys[key]}"}

        def run() -> None:
            with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers,
                              timeout=120) as response:  # fmt: skip
                assert response.status_code == 200
                for _ in response.iter_lines():
                    if request_id in ended and ended[request_id].is_set():
                        return  # the client leaves: its slot frees now

        threads.append(threading.Thread(target=run))
        threads[-1].start()

    def waiting(n: int) -> bool:
        return scrape(gateway.url)["gateway_queue_depth"] == n

    send("A", "A1", 100_000)  # ~500 s of tokens: ends only when the test ends it
    send("B", "B1", 100_000)
    wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 2, what="A and B running")
    send("A", "A2", 20)
    wait_until(lambda: waiting(1), what="A's second waiting")
    send("B", "B2", 20)
    wait_until(lambda: waiting(2), what="B's second waiting")
    send("C", "C1", 20)
    wait_until(lambda: waiting(3), what="C waiting")
    ended["A1"].set()  # the first slot to free
    wait_until(lambda: waiting(1), what="C and then A's second served in A's slot")
    ended["B1"].set()
    for thread in threads:
        thread.join(120)
    wait_until(lambda: trace.exists() and len(trace.read_text().splitlines()) == 5, what="5 traced")
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    by_prompt = sorted(lines, key=lambda line: line["prompt_tokens"])
    by_id = dict(zip(ORDER, by_prompt, strict=True))
    assert by_id["C1"]["scheduled"] >= by_id["A1"]["finish"]
    assert by_id["C1"]["scheduled"] < by_id["A2"]["scheduled"] < by_id["B2"]["scheduled"]
