"""Admission and streaming through a real gateway and simulator: the slot bound holds and no exit path leaks.

Gateway state is read from its ``/metrics`` (``gateway_slots_in_use``, ``gateway_queue_depth``), the
backend's from the simulator's vLLM-named ``/metrics``, as an operator would.
"""

from __future__ import annotations

import itertools
import json
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"


def chat(text: str, **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


def idle(gateway, sim) -> bool:
    g, s = scrape(gateway.url), scrape(sim.url)
    return (
        g["gateway_slots_in_use"] == 0
        and g["gateway_queue_depth"] == 0
        and s["vllm:num_requests_running"] == 0
        and s["vllm:num_requests_waiting"] == 0
    )


def data_events(response: httpx.Response):
    """The ``data`` payloads of a streamed response (call once per response: it consumes the stream)."""
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield line[6:]


@pytest.fixture
def auth(make_key) -> dict[str, str]:
    return {"Authorization": f"Bearer {make_key('slots')}"}


def test_eight_clients_never_push_the_backend_past_two(start_sim, start_gateway, make_key, tmp_path) -> None:
    """The backend's own record of every sequence (the simulator's trace: when each took a slot and
    left) shows two running at once at most, and two at some moment."""
    trace = tmp_path / "trace.jsonl"
    sim = start_sim(slots=8, decode_tps=400, trace_file=str(trace))  # the backend itself would take 8 ...
    gateway = start_gateway(sim.url, slots=2)  # ... the gateway admits 2
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("c"), max_retries=0)

    def one(i: int) -> str:
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"client {i}"}], max_tokens=40, stream=True
        )
        deltas = [c.choices[0].delta for c in stream if c.choices]
        return "".join((d.content or "") + (d.model_extra.get("reasoning") or "") for d in deltas)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(one, range(8)))
    assert all(answers)
    wait_until(lambda: trace.exists() and len(trace.read_text().splitlines()) == 8, what="8 traced")
    sequences = [json.loads(line) for line in trace.read_text().splitlines()]
    # a slot given back (-1) before one taken (+1) at the same instant: they did not overlap
    steps = sorted([(s["finish"], -1) for s in sequences] + [(s["scheduled"], 1) for s in sequences])
    running = list(itertools.accumulate(step for _, step in steps))
    assert max(running) == 2  # reached the bound, never passed it
    wait_until(lambda: idle(gateway, sim), what="idle after load")


def test_first_chunk_arrives_while_upstream_still_generates(start_sim, start_gateway, auth) -> None:
    sim = start_sim(decode_tps=40)
    gateway = start_gateway(sim.url)
    body = chat("stream slowly", stream=True, max_tokens=80)
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=auth) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-accel-buffering"] == "no"
        assert "content-encoding" not in response.headers
        events = data_events(response)
        first = json.loads(next(events))
        assert first["object"] == "chat.completion.chunk"
        # the backend is still generating this very request when the client has its first chunk
        assert scrape(sim.url)["vllm:num_requests_running"] == 1
        rest = list(events)
    assert rest[-1] == "[DONE]"
    wait_until(lambda: idle(gateway, sim), what="idle")


def test_event_streams_are_not_compressed(start_sim, start_gateway, auth) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url)
    headers = {**auth, "Accept-Encoding": "gzip, br"}
    with httpx.stream(
        "POST", gateway.url + "/v1/chat/completions", json=chat("hi", stream=True), headers=headers
    ) as response:
        assert "content-encoding" not in response.headers
        assert list(data_events(response))[-1] == "[DONE]"


def test_queue_full_and_queue_timeout_are_429_with_retry_after(start_sim, start_gateway, auth) -> None:
    sim = start_sim(decode_tps=20)
    gateway = start_gateway(sim.url, slots=1, queue_max=1, queue_timeout_s=0.5)
    url = gateway.url + "/v1/chat/completions"
    with httpx.stream("POST", url, json=chat("hold", stream=True, max_tokens=200), headers=auth) as held:
        events = data_events(held)  # keep a reference: a dropped iter_lines() closes the response
        next(events)  # holds the only slot until the stream is closed
        with ThreadPoolExecutor(1) as pool:
            queued = pool.submit(httpx.post, url, json=chat("wait"), headers=auth, timeout=10)
            wait_until(lambda: scrape(gateway.url)["gateway_queue_depth"] == 1, what="one queued")
            full = httpx.post(url, json=chat("full"), headers=auth)
            timed_out = queued.result()
    for response, code in [(full, "queue_full"), (timed_out, "queue_timeout")]:
        assert response.status_code == 429
        assert response.json()["error"]["type"] == "rate_limit_error"
        assert response.json()["error"]["code"] == code
        assert int(response.headers["retry-after"]) >= 1
    wait_until(lambda: idle(gateway, sim), what="idle")


def test_client_gone_while_queued_never_reaches_the_backend(start_sim, start_gateway, auth) -> None:
    sim = start_sim(decode_tps=30)
    gateway = start_gateway(sim.url, slots=1)
    url = gateway.url + "/v1/chat/completions"
    with httpx.stream("POST", url, json=chat("hold", stream=True, max_tokens=40), headers=auth) as held:
        events = data_events(held)
        next(events)
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url, json=chat("impatient"), headers=auth, timeout=0.3)
        wait_until(lambda: scrape(gateway.url)["gateway_queue_depth"] == 0, what="queue empties")
        assert list(events)[-1] == "[DONE]"
    wait_until(lambda: idle(gateway, sim), what="idle")
    assert scrape(sim.url)["vllm:request_success_total"] == 1  # only the holder ever ran


def test_client_gone_while_waiting_for_upstream_headers(start_sim, start_gateway, auth) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(gateway.url + "/v1/chat/completions", json=chat("#sim:stall=5"), headers=auth, timeout=0.3)
    wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 0, timeout_s=2, what="slot freed")
    wait_until(lambda: idle(gateway, sim), what="idle")


def test_client_gone_mid_stream_aborts_upstream_and_frees_slot(start_sim, start_gateway, auth) -> None:
    sim = start_sim(decode_tps=20)
    gateway = start_gateway(sim.url)
    body = chat("long answer", stream=True, max_tokens=500)
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=auth) as response:
        events = data_events(response)
        next(events)
        assert scrape(sim.url)["vllm:num_requests_running"] == 1
    wait_until(lambda: idle(gateway, sim), timeout_s=3, what="abort reaches the backend")
    assert scrape(sim.url).get("vllm:request_success_total", 0) == 0  # aborted, not finished


def test_upstream_error_status_is_relayed_in_openai_shape(start_sim, start_gateway, make_key) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("e"), max_retries=0)
    with pytest.raises(openai.InternalServerError) as info:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "#sim:status=500"}])
    assert info.value.status_code == 500
    assert info.value.body["code"] == "upstream_error"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "#sim:status=400"}])
    wait_until(lambda: idle(gateway, sim), what="idle")


def test_upstream_dying_mid_stream_ends_with_an_error_event(start_sim, start_gateway, make_key, auth) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url)
    body = chat("#sim:die_after=3", stream=True)
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=auth) as response:
        events = list(data_events(response))
    assert "[DONE]" not in events
    error = json.loads(events[-1])["error"]
    assert error["code"] == "upstream_stream_error" and error["type"]
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("sdk"), max_retries=0)
    stream = client.chat.completions.create(model=MODEL, messages=body["messages"], stream=True)
    with pytest.raises(openai.APIError, match="stream broke"):
        list(stream)
    wait_until(lambda: idle(gateway, sim), what="idle")


def test_upstream_unreachable_is_503_before_any_byte(start_gateway, make_key) -> None:
    """With no restart hold (``test_backend_restart.py`` has the hold)."""
    from tests.support.servers import free_port

    gateway = start_gateway(f"http://127.0.0.1:{free_port()}", upstream_restart_hold_s=0)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("d"), max_retries=0)
    for stream in (False, True):
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "x"}], stream=stream
            )
        assert info.value.status_code == 503
        assert info.value.body["code"] == "upstream_unavailable"
    assert scrape(gateway.url)["gateway_slots_in_use"] == 0


def test_a_queued_stream_that_times_out_gets_an_error_event(start_sim, start_gateway, auth) -> None:
    sim = start_sim(decode_tps=20)
    gateway = start_gateway(sim.url, slots=1, queue_timeout_s=0.5)
    url = gateway.url + "/v1/chat/completions"
    with httpx.stream("POST", url, json=chat("hold", stream=True, max_tokens=200), headers=auth) as held:
        events = data_events(held)
        next(events)
        with httpx.stream("POST", url, json=chat("wait", stream=True), headers=auth) as queued:
            lines = list(queued.iter_lines())
    assert lines[0] == ": queued 1 slot"
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert error["code"] == "queue_timeout" and error["type"] == "rate_limit_error"
    wait_until(lambda: idle(gateway, sim), what="idle")


def test_a_long_prefill_gets_keep_alive_comments(start_sim, start_gateway, auth) -> None:
    sim = start_sim(prefill_tps=100)  # ~1.5 s before the first token of a 150-token prompt
    gateway = start_gateway(sim.url, keep_alive_s=0.2)
    body = chat("word " * 120, stream=True, max_tokens=5)
    with httpx.stream("POST", gateway.url + "/v1/chat/completions", json=body, headers=auth) as response:
        lines = [line for line in response.iter_lines() if line]
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data: "))
    assert lines[:first_data].count(": keep-alive") >= 3
    assert lines[-1] == "data: [DONE]" and ": keep-alive" not in lines[first_data:-1]
