"""vLLM-shaped errors and the ``#sim:`` fault directives, over real HTTP."""

from __future__ import annotations

import time

import httpx
import openai
import pytest

from tests.sim.helpers import MODEL, chat_body, scrape, wait_for

CHAT = "/v1/chat/completions"


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == response.status_code
    return body["error"]


def test_unknown_model_is_404(sim):
    response = httpx.post(sim.base_url + CHAT, json={**chat_body("hi"), "model": "gpt-5"})
    assert response.status_code == 404
    error = error_of(response)
    assert error["type"] == "NotFoundError" and "gpt-5" in error["message"]
    assert response.headers["x-dspark-simulator"] == "1"
    with pytest.raises(openai.NotFoundError):
        sdk(sim.base_url).chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": "hi"}])


def test_router_errors_are_fastapis_json(sim):
    """vLLM's server is FastAPI: an unknown path or a wrong method answers ``{"detail": ...}`` JSON, and
    a gateway reads that shape (gateway/backends/upstream.py); the simulator's Starlette app does too."""
    missing = httpx.post(sim.base_url + "/v1/no-such-route", json={})
    assert (missing.status_code, missing.json()) == (404, {"detail": "Not Found"})
    wrong = httpx.get(sim.base_url + CHAT)
    assert (wrong.status_code, wrong.json()) == (405, {"detail": "Method Not Allowed"})
    assert wrong.headers["allow"] == "POST" and wrong.headers["x-dspark-simulator"] == "1"
    head = httpx.head(sim.base_url + "/health")  # FastAPI's GET routes take no HEAD
    assert (head.status_code, head.headers["allow"]) == (405, "GET")


def test_prompt_over_context_is_400(new_sim):
    server = new_sim(max_model_len=100)
    response = httpx.post(server.base_url + CHAT, json=chat_body("z" * 1000))
    assert response.status_code == 400
    assert error_of(response)["type"] == "BadRequestError"
    assert "maximum context length is 100 tokens" in error_of(response)["message"]
    too_long_completion = httpx.post(server.base_url + CHAT, json=chat_body("hi", max_tokens=99))
    assert too_long_completion.status_code == 400
    assert httpx.post(server.base_url + CHAT, json=chat_body("hi", max_tokens=50)).status_code == 200


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b'{"messages": []}', b'{"messages": 3}'])
def test_bad_bodies_are_400(sim, content):
    response = httpx.post(sim.base_url + CHAT, content=content, headers={"content-type": "application/json"})
    assert response.status_code == 400 and error_of(response)["type"] == "BadRequestError"


@pytest.mark.parametrize("extra", [{"n": 2}, {"stream_options": {"include_usage": True}}, {"max_tokens": 0}])
def test_unsupported_options_are_400(sim, extra):
    assert httpx.post(sim.base_url + CHAT, json=chat_body("hi", **extra)).status_code == 400


STATUSES = [
    (500, openai.InternalServerError),
    (429, openai.RateLimitError),
    (503, openai.InternalServerError),
]


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url + "/v1", api_key="x", max_retries=0)


@pytest.mark.parametrize("status,error_class", STATUSES)
def test_status_directive(sim, status, error_class):
    with pytest.raises(error_class) as info:
        sdk(sim.base_url).chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"hello #sim:status={status}"}], stream=True
        )
    assert info.value.status_code == status
    raw = httpx.post(sim.base_url + "/v1/completions", json={"prompt": f"#sim:status={status}"})
    assert raw.status_code == status and error_of(raw)["code"] == status


def test_unknown_directive_is_400(sim):
    assert httpx.post(sim.base_url + CHAT, json=chat_body("#sim:explode=1")).status_code == 400


def test_die_after_breaks_the_stream(new_sim):
    server = new_sim(decode_tps=500)
    body = chat_body("count from 1 to 200 #sim:die_after=3", stream=True)
    received: list[str] = []
    with (
        httpx.Client(base_url=server.base_url, timeout=10) as client,
        client.stream("POST", CHAT, json=body) as r,
    ):
        assert r.status_code == 200
        with pytest.raises(httpx.RemoteProtocolError):
            for line in r.iter_lines():
                if line.startswith("data: "):
                    received.append(line)
    assert len(received) == 3 and "data: [DONE]" not in received
    wait_for(lambda: scrape(server.base_url)["vllm:num_requests_running"] == 0, what="slot freed")
    stream = sdk(server.base_url).chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "count to 200 #sim:die_after=5"}], stream=True
    )
    with pytest.raises((httpx.RemoteProtocolError, openai.APIError)):
        list(stream)


def test_die_after_beyond_the_stream_has_no_effect(sim):
    body = chat_body("count to 2 #sim:die_after=1000", stream=True)
    with httpx.Client(base_url=sim.base_url) as client, client.stream("POST", CHAT, json=body) as r:
        assert r.read().decode().endswith("data: [DONE]\n\n")


def test_decode_tps_directive_sets_one_sequences_speed(sim):
    # 12 tokens: the first from prefill (instant here), 11 decoded at 20 tokens/s: at least 0.55 s
    body = chat_body("count to 50 #sim:decode_tps=20", max_tokens=12, ignore_eos=True)
    start = time.perf_counter()
    response = httpx.post(sim.base_url + CHAT, json=body, timeout=10)
    assert response.status_code == 200 and time.perf_counter() - start >= 11 / 20
    assert response.json()["usage"]["completion_tokens"] == 12
    for bad in ("0", "-5", "fast", "2e6"):
        assert httpx.post(sim.base_url + CHAT, json=chat_body(f"#sim:decode_tps={bad}")).status_code == 400


def test_ignore_max_tokens_generates_past_the_cap_it_was_given(sim):
    body = chat_body("count to 50 #sim:ignore_max_tokens=1", max_tokens=5)
    answer = httpx.post(sim.base_url + CHAT, json=body, timeout=10).json()
    assert answer["usage"]["completion_tokens"] > 5 and answer["choices"][0]["finish_reason"] == "stop"


def test_stall_delays_the_first_byte(sim):
    start = time.perf_counter()
    response = httpx.post(sim.base_url + CHAT, json=chat_body("count to 2 #sim:stall=0.3"))
    assert response.status_code == 200 and time.perf_counter() - start >= 0.3
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(sim.base_url + CHAT, json=chat_body("#sim:stall=2", stream=True), timeout=0.2)
