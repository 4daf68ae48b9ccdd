"""Early, honest refusal: a request that would wait longer than it accepts (``x-max-wait-s``, else its
key's ``max_wait_s``) is refused at once with 429 ``wait_too_long`` and a ``Retry-After`` from the
queue's measured pace, instead of timing out in the queue; one that accepts the wait is served; a bad
header is a 400 in the client's own API shape. A real gateway and simulator, the official SDKs."""

from __future__ import annotations

import threading

import anthropic
import httpx
import openai
import pytest

from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"
ASK = [{"role": "user", "content": "hi"}]


def test_a_request_expected_to_wait_too_long_is_refused_at_once(start_sim, start_gateway, make_key) -> None:
    sim = start_sim(slots=1, decode_tps=100)
    gateway = start_gateway(sim.url, slots=1)
    holder = make_key("holder")
    body = {"model": MODEL, "messages": ASK, "max_tokens": 300}
    running = threading.Thread(
        target=lambda: httpx.post(
            gateway.url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {holder}"},
            timeout=60,
        )
    )  # fmt: skip
    running.start()
    wait_until(lambda: scrape(gateway.url)["gateway_slots_in_use"] == 1, what="the slot held")
    impatient = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("impatient"), max_retries=0)
    with pytest.raises(openai.RateLimitError) as refused:
        impatient.chat.completions.create(
            model=MODEL, messages=ASK, max_tokens=4, extra_headers={"x-max-wait-s": "0.5"}
        )
    assert refused.value.code == "wait_too_long"
    assert int(refused.value.response.headers["retry-after"]) >= 1
    # the key's own setting applies when the request names none; the header wins over it
    keyed = openai.OpenAI(
        base_url=gateway.url + "/v1", api_key=make_key("keyed", max_wait_s=0.5), max_retries=0
    )
    with pytest.raises(openai.RateLimitError):
        keyed.chat.completions.create(model=MODEL, messages=ASK, max_tokens=4)
    served = keyed.chat.completions.create(
        model=MODEL, messages=ASK, max_tokens=4, extra_headers={"x-max-wait-s": "120"}, timeout=60
    )
    assert served.choices[0].finish_reason == "length"
    running.join(60)


def test_a_bad_max_wait_header_is_a_400_in_the_clients_shape(start_sim, start_gateway, make_key) -> None:
    gateway = start_gateway(start_sim().url)
    key = make_key("bad-header")
    with pytest.raises(openai.BadRequestError) as chat:
        openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0).chat.completions.create(
            model=MODEL, messages=ASK, extra_headers={"x-max-wait-s": "soon"}
        )
    assert chat.value.code == "invalid_value" and chat.value.param == "x-max-wait-s"
    with pytest.raises(anthropic.BadRequestError) as messages:
        anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0).messages.create(
            model=MODEL, max_tokens=4, messages=ASK, extra_headers={"x-max-wait-s": "-1"}
        )
    assert messages.value.body["type"] == "error"
    assert messages.value.body["error"]["type"] == "invalid_request_error"
