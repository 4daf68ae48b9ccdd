"""A backend restart does not fail the requests that arrive meanwhile: they are held (their slot with
them) for ``GATEWAY_UPSTREAM_RESTART_HOLD_S``, a stream told ``: queued 0 backend``, and served when
the backend is back; past the hold they get the 503 they would have had at once. A backend that keeps
failing has its circuit opened: requests stop reaching it until a trial succeeds. Real sockets: a fake
vLLM stopped and started again on its port, the official OpenAI SDK as the client."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import openai
import pytest

from tests.support.faulty_upstream import FaultyUpstream

MODEL = "deepseek-v4-flash-0731"


def chat(text: str = "hello", **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


def test_requests_during_a_restart_are_held_then_served(start_gateway, make_key) -> None:
    backend = FaultyUpstream().start()
    gateway = start_gateway(backend.url, slots=2, upstream_restart_hold_s=20, backend_poll_s=0.2)
    key = make_key("during-restart")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    assert client.chat.completions.create(**chat()).choices[0].message.content
    backend.stop()  # the restart begins
    answers: dict[str, object] = {}

    def non_stream() -> None:
        answers["json"] = client.chat.completions.create(**chat(), timeout=60)

    def stream() -> None:
        with httpx.stream(
            "POST", gateway.url + "/v1/chat/completions", json=chat(stream=True),
            headers={"Authorization": f"Bearer {key}"}, timeout=60,
        ) as response:  # fmt: skip
            answers["status"] = response.status_code
            answers["stream"] = response.read()

    threads = [threading.Thread(target=non_stream), threading.Thread(target=stream)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)
    assert all(thread.is_alive() for thread in threads)  # held, not refused
    restarted = FaultyUpstream(port=backend.port).start()
    try:
        for thread in threads:
            thread.join(30)
        assert answers["json"].choices[0].message.content  # type: ignore[attr-defined]
        assert answers["status"] == 200
        body = answers["stream"]
        assert isinstance(body, bytes)
        assert body.startswith(b": queued 0 backend") and b"data: [DONE]" in body and b'"error"' not in body
    finally:
        restarted.stop()


def test_past_the_hold_the_request_gets_its_503(start_gateway, make_key) -> None:
    backend = FaultyUpstream().start()
    gateway = start_gateway(backend.url, upstream_restart_hold_s=1.0)
    backend.stop()  # and it never comes back
    key = make_key("too-long")
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    started = time.monotonic()
    with pytest.raises(openai.InternalServerError) as refused:
        client.chat.completions.create(**chat())
    assert refused.value.status_code == 503 and time.monotonic() - started >= 1.0
    auth = {"Authorization": f"Bearer {key}"}
    response = httpx.post(
        gateway.url + "/v1/chat/completions", json=chat(stream=True), headers=auth, timeout=30
    )
    assert response.status_code == 200  # held as a stream, then told
    assert response.text.startswith(": queued 0 backend") and "upstream_unavailable" in response.text


def test_the_requests_queued_behind_a_held_one_share_its_outages_deadline(start_gateway, make_key) -> None:
    """One slot, the backend gone for good, a 1 s hold: four requests at once all get their 503 about
    a second after the outage began, not a second each after the one before (the queue draining one
    hold period per slot)."""
    backend = FaultyUpstream().start()
    gateway = start_gateway(backend.url, slots=1, upstream_restart_hold_s=1.0)
    backend.stop()
    auth = {"Authorization": f"Bearer {make_key('queued')}"}

    async def four() -> list[int]:
        async with httpx.AsyncClient(timeout=30) as http:
            url = gateway.url + "/v1/chat/completions"
            sent = (http.post(url, json=chat(), headers=auth) for _ in range(4))
            return [answer.status_code for answer in await asyncio.gather(*sent)]

    started = time.monotonic()
    assert asyncio.run(four()) == [503] * 4
    assert time.monotonic() - started < 3.0  # one hold (1 s) and its polls, not four in a row


def test_a_backend_that_keeps_failing_stops_getting_requests(start_gateway, make_key) -> None:
    backend = FaultyUpstream().start()
    try:
        gateway = start_gateway(backend.url, upstream_restart_hold_s=0)
        client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("failing"), max_retries=0)
        codes = []
        for _ in range(8):  # it is not serving: 503 (a 500 would be about one request's input)
            with pytest.raises(openai.APIStatusError) as failed:
                client.chat.completions.create(**chat("fault:status_503_json"))
            codes.append((failed.value.status_code, failed.value.code))
        assert codes[:3] == [(503, "upstream_error")] * 3  # three failures open the circuit ...
        assert set(codes[3:]) == {(503, "upstream_unavailable")} and backend.posts == 3  # ... then none
        time.sleep(1.1)  # the cool-down: one trial goes, and it fails again
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(**chat("fault:status_503_json"))
        assert backend.posts == 4
        time.sleep(2.1)  # a longer cool-down, then a trial that succeeds closes the circuit
        assert client.chat.completions.create(**chat()).choices[0].message.content
        assert client.chat.completions.create(**chat()).choices[0].message.content
        assert backend.posts == 6
    finally:
        backend.stop()
