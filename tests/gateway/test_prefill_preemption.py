"""A short chat does not wait for a cold long prompt's prefill (``GATEWAY_PREFILL_PREEMPTION``,
gateway/admission/scheduler.py ``_preempt``, gateway/proxy/placement.py ``first_output``): one slot;
once the gateway has measured the backend, a cold prompt streams and, while it still prefills, a
one-line chat comes: the prompt's sequence is aborted and sent again after the chat, resuming from
the blocks it had computed (the simulator keeps them, as vLLM does), and its client sees one whole
answer. Real sockets: the simulator, the gateway, httpx clients."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"


@pytest.mark.parametrize("preemption", [True, False])
def test_a_chat_takes_the_slot_of_a_cold_prefill_which_resumes_after_it(
    start_sim, start_gateway, make_key, tmp_path: Path, preemption: bool
) -> None:
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(slots=1, prefill_tps=10_000, prefill_chunk_tokens=1_000, trace_file=str(trace))
    gateway = start_gateway(sim.url, slots=1, prefill_preemption=preemption)
    keys = {name: make_key(name) for name in ("docs", "chat")}
    answers: dict[str, dict[str, Any]] = {}

    def body(content: str, max_tokens: int) -> dict:
        return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens,
                "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip

    def send(name: str, key: str, request: dict) -> threading.Thread:
        def run() -> None:
            text, usage = "", None
            with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=request, timeout=120,
                              headers={"Authorization": f"Bearer {keys[key]}"}) as response:  # fmt: skip
                assert response.status_code == 200
                for line in response.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunk = json.loads(line[6:])
                    for choice in chunk["choices"]:  # what the model thinks, then its answer
                        delta = choice["delta"]
                        text += (delta.get("reasoning_content") or "") + (delta.get("content") or "")
                    usage = chunk.get("usage") or usage
                answers[name] = {"id": response.headers["x-request-id"], "text": text, "usage": usage}

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    # a long prompt streamed: its TTFT and decode rate are the rates the gateway measures
    send("measure", "docs", body("tell me about the weather " * 3_000, 40)).join(60)
    prompt = send("prompt", "docs", body("summarise these build logs " * 3_000, 40))  # ~2 s of prefill
    wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 1, what="the cold prompt running")
    chat = send("chat", "chat", body("count to 3", 8))
    for thread in (chat, prompt):
        thread.join(120)
    assert answers["prompt"]["text"] and answers["chat"]["text"]
    sent = 4 if preemption else 3  # the prompt sent twice, or once
    wait_until(lambda: trace.exists() and len(trace.read_text().splitlines()) == sent, what="all traced")
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    runs = {name: [line for line in lines if answers[name]["id"] in line["request_id"]] for name in answers}
    [chat_run] = runs["chat"]
    if not preemption:  # the chat waited for the whole prompt
        [prompt_run] = runs["prompt"]
        assert chat_run["scheduled"] >= prompt_run["finish"]
        return
    aborted, resumed = runs["prompt"]  # sent twice: aborted in its prefill, then sent again
    assert aborted["reason"] == "abort" and aborted["first_token"] is None
    assert aborted["finish"] <= chat_run["scheduled"] and chat_run["finish"] <= resumed["scheduled"]
    usage = answers["prompt"]["usage"]
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0  # resumed from the blocks it computed
    assert usage["completion_tokens"] == 40  # one whole answer, told nothing of it
