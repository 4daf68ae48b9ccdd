"""The gateway in front of a REAL vLLM (CPU build, scripted tiny model), driven by the official OpenAI SDK.

Proves against the real engine what the simulator tests prove against its stand-in: the round trip,
the two-sequence bound (vLLM's own waiting queue stays empty: the gateway holds the queue), and that a
client that goes away mid-stream makes vLLM abort the request and the gateway free its slot.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from openai import OpenAI

from tests.support.probes import scrape, wait_until
from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer

PROMPT = [{"role": "user", "content": "Hi"}]
#: vLLM extension: keep sampling past EOS, so the scripted chain loops and streams stay busy long enough.
LONG = {"ignore_eos": True}


@pytest.fixture
def gateway(vllm_server: VLLMServer, start_gateway):
    return start_gateway(vllm_server.base_url, served_model=TINY_MODEL_NAME, slots=2)


@pytest.fixture
def client(gateway, make_key) -> OpenAI:
    return OpenAI(base_url=gateway.url + "/v1", api_key=make_key("e2e"), max_retries=0, timeout=120)


def backend_idle(vllm_server: VLLMServer, gateway) -> bool:
    v, g = scrape(vllm_server.base_url), scrape(gateway.url)
    return v["vllm:num_requests_running"] == 0 and g["gateway_slots_in_use"] == 0


def test_chat_round_trip_through_the_gateway(client: OpenAI) -> None:
    reply = client.chat.completions.create(
        model=TINY_MODEL_NAME, messages=PROMPT, max_tokens=50, temperature=0
    )
    message = reply.choices[0].message
    assert (message.model_extra["reasoning"], message.content) == ("Let me think", "Hello world")
    assert reply.usage.completion_tokens == 12

    stream = client.chat.completions.create(
        model=TINY_MODEL_NAME,
        messages=PROMPT,
        max_tokens=50,
        stream=True,
        temperature=0,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.model_extra.get("reasoning") or "" for d in deltas) == "Let me think"
    assert "".join(d.content or "" for d in deltas) == "Hello world"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12


def test_eight_clients_never_over_admit(client: OpenAI, vllm_server: VLLMServer, gateway) -> None:
    peak = {"running": 0.0, "waiting": 0.0}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            values = scrape(vllm_server.base_url)
            peak["running"] = max(peak["running"], values["vllm:num_requests_running"])
            peak["waiting"] = max(peak["waiting"], values["vllm:num_requests_waiting"])

    def one(_: int) -> int:
        stream = client.chat.completions.create(
            model=TINY_MODEL_NAME,
            messages=PROMPT,
            max_tokens=400,
            stream=True,
            extra_body=LONG,
            stream_options={"include_usage": True},
        )
        return [c for c in stream][-1].usage.completion_tokens

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        with ThreadPoolExecutor(8) as pool:
            tokens = list(pool.map(one, range(8)))
    finally:
        done.set()
        watcher.join()
    assert tokens == [400] * 8
    # never more than the slots; two at once is the usual sight, but on a loaded machine vLLM may end
    # one stream before the next one's prefill reaches it (both slots used: tests/gateway/test_slots_*)
    assert 1 <= peak["running"] <= 2
    assert peak["waiting"] == 0
    wait_until(lambda: backend_idle(vllm_server, gateway), what="idle")


def test_client_gone_mid_stream_aborts_in_vllm(vllm_factory, start_gateway, make_key) -> None:
    """Without speculation (one token per step) a 450-token answer takes long enough to be cut short:
    vLLM must stop generating well before max_tokens, and both sides must go idle."""
    vllm_server = vllm_factory(())
    gateway = start_gateway(vllm_server.base_url, served_model=TINY_MODEL_NAME)
    before = scrape(vllm_server.base_url).get("vllm:generation_tokens_total", 0)
    headers = {"Authorization": f"Bearer {make_key('quitter')}"}
    body = {
        "model": TINY_MODEL_NAME,
        "messages": PROMPT,
        "max_tokens": 450,
        "stream": True,
        "temperature": 0,
        **LONG,
    }
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=headers) as response:
        lines = response.iter_lines()
        # gone at the first event: nothing else in the way of the abort while vLLM decodes the rest
        assert next(line for line in lines if line.startswith("data: "))
    wait_until(lambda: backend_idle(vllm_server, gateway), timeout_s=10, what="vLLM abort and slot release")
    generated = scrape(vllm_server.base_url)["vllm:generation_tokens_total"] - before
    assert 1 <= generated < 450  # it ran, and was aborted before its end
