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
    """A and B hold both slots with streams the test ends itself (so no slot frees by the clock), A and B
    queue one more each, then C; ending A's stream frees the first slot: C's, not A's next."""
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(slots=2, decode_tps=200, trace_file=str(trace))
    gateway = start_gateway(sim.url, slots=2)
    keys = {name: make_key(name) for name in "ABC"}
    threads: list[threading.Thread] = []
    ended = {name: threading.Event() for name in ("A1", "B1")}
    ids: dict[str, str] = {}

    def send(key: str, name: str, max_tokens: int) -> None:
        # the holders decode slowly: a client thread of a loaded machine keeps up, never cut as slow
        content = "count from 1 to 900" + (" #sim:decode_tps=20" if name in ended else "")
        body = {"model": MODEL, "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens, "stream": True}  # fmt: skip
        headers = {"Authorization": f"Bearer {keys[key]}"}

        def run() -> None:
            with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers,
                              timeout=120) as response:  # fmt: skip
                assert response.status_code == 200
                ids[name] = response.headers["x-request-id"]
                for _ in response.iter_lines():
                    if name in ended and ended[name].is_set():
                        return  # the client leaves: its slot frees now

        threads.append(threading.Thread(target=run))
        threads[-1].start()

    def waiting(n: int) -> bool:
        return scrape(gateway.url)["gateway_queue_depth"] == n

    send("A", "A1", 100_000)  # ~5,000 s of tokens: ends only when the test ends it
    send("B", "B1", 100_000)
    wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 2, what="A and B running")
    send("A", "A2", 20)
    wait_until(lambda: waiting(1), what="A's second waiting")
    send("B", "B2", 20)
    wait_until(lambda: waiting(2), what="B's second waiting")
    send("C", "C1", 20)
    wait_until(lambda: waiting(3), what="C waiting")
    ended["A1"].set()  # the first slot to free: the three waiting are served in it, one after another
    wait_until(lambda: waiting(0), what="C's, A's second and B's second served in A's slot")
    ended["B1"].set()
    for thread in threads:
        thread.join(120)
    wait_until(lambda: trace.exists() and len(trace.read_text().splitlines()) == 5, what="5 traced")
    lines = {line["request_id"]: line for line in map(json.loads, trace.read_text().splitlines())}
    by_id = {name: next(v for k, v in lines.items() if request_id in k) for name, request_id in ids.items()}
    assert by_id["C1"]["scheduled"] >= by_id["A1"]["finish"]
    assert by_id["C1"]["scheduled"] < by_id["A2"]["scheduled"] < by_id["B2"]["scheduled"]


def test_a_short_chat_goes_before_a_cold_long_prompt_that_queued_first(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    """One slot. Once the gateway has measured the backend (a long prompt and its answer), a cold
    25k-token prompt queued first and a one-line chat queued after it: the freed slot goes to the chat
    (what it is expected to take is a fraction of the prompt's prefill), then to the prompt."""
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(slots=1, prefill_tps=50_000, trace_file=str(trace))
    gateway = start_gateway(sim.url, slots=1)
    keys = {name: make_key(name) for name in ("agent", "chat", "holder")}
    ids: dict[str, str] = {}
    stop = threading.Event()

    def body(content: str, max_tokens: int, stream: bool = False) -> dict:
        return {"model": MODEL, "messages": [{"role": "user", "content": content}],
                "max_tokens": max_tokens, "stream": stream}  # fmt: skip

    def send(name: str, key: str, request: dict) -> threading.Thread:
        def run() -> None:
            with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=request, timeout=120,
                              headers={"Authorization": f"Bearer {keys[key]}"}) as response:  # fmt: skip
                assert response.status_code == 200
                ids[name] = response.headers["x-request-id"]
                for _ in response.iter_lines():
                    if stop.is_set() and name == "holder":
                        return  # the client leaves: its slot frees now

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    def waiting(n: int) -> bool:
        return scrape(gateway.url)["gateway_queue_depth"] == n

    # a streamed long prompt: its TTFT and decode rate are the rates the gateway measures
    send("measure", "agent", body("tell me about the weather " * 4_000, 40, stream=True)).join(60)
    threads = [send("holder", "holder", body("count from 1 to 9000", 100_000, stream=True))]
    wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 1, what="the holder running")
    threads.append(send("prompt", "agent", body("summarise these build logs " * 4_000, 40)))
    wait_until(lambda: waiting(1), what="the long prompt waiting")
    threads.append(send("chat", "chat", body("count to 3", 40)))
    wait_until(lambda: waiting(2), what="the chat waiting")
    stop.set()
    for thread in threads:
        thread.join(120)
    wait_until(lambda: trace.exists() and len(trace.read_text().splitlines()) == 4, what="4 traced")
    lines = {line["request_id"]: line for line in map(json.loads, trace.read_text().splitlines())}
    traced = {name: next(v for k, v in lines.items() if request_id in k) for name, request_id in ids.items()}
    assert traced["prompt"]["prompt_tokens"] > 20_000 > traced["chat"]["prompt_tokens"]
    assert traced["holder"]["finish"] <= traced["chat"]["scheduled"] < traced["prompt"]["scheduled"]
