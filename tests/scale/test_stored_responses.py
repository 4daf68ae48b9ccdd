"""Stored responses with several backends: each one is read, cancelled and continued on the backend
that stores it (vLLM keeps them in its own memory), found through the owner table's backend name;
a response whose backend is no longer configured is a 404 in the Responses API's shape. Two
simulators with their response store on (vLLM's ``VLLM_ENABLE_RESPONSES_API_STORE=1``), the OpenAI
SDK as the client."""

from __future__ import annotations

import httpx
import openai
import pytest

MODEL = "deepseek-v4-flash-0731"


def test_each_stored_response_is_served_by_the_backend_that_stores_it(start_sim, start_gateway, make_key):
    sims = {name: start_sim(responses_store=True) for name in ("a", "b")}
    gateway = start_gateway(",".join(f"{name}={sim.url}" for name, sim in sims.items()), slots=1)
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("agent"), max_retries=0)
    stored_on: dict[str, str] = {}
    for user in (f"conversation-{i}" for i in range(8)):  # affinity spreads them over both
        created = client.responses.create(model=MODEL, input="Count to 2.", store=True, user=user)
        [where] = [
            n for n, sim in sims.items() if httpx.get(f"{sim.url}/v1/responses/{created.id}").is_success
        ]
        stored_on[created.id] = where
    assert set(stored_on.values()) == {"a", "b"}
    for response_id in stored_on:
        assert client.responses.retrieve(response_id).id == response_id
        assert (
            httpx.post(
                f"{gateway.url}/v1/responses/{response_id}/cancel",
                headers={"Authorization": f"Bearer {client.api_key}"},
            ).json()["id"]
            == response_id
        )
        follow_up = client.responses.create(model=MODEL, input="And 3?", previous_response_id=response_id)
        assert follow_up.status == "completed"


def test_a_response_on_a_backend_no_longer_configured_is_not_found(start_sim, start_gateway, make_key):
    sims = {name: start_sim(responses_store=True) for name in ("a", "b")}
    key = make_key("agent")
    both = start_gateway(",".join(f"{name}={sim.url}" for name, sim in sims.items()), slots=1)
    client = openai.OpenAI(base_url=both.url + "/v1", api_key=key, max_retries=0)
    on_b = None
    for user in (f"conversation-{i}" for i in range(16)):
        created = client.responses.create(model=MODEL, input="Count to 2.", store=True, user=user)
        if httpx.get(f"{sims['b'].url}/v1/responses/{created.id}").is_success:
            on_b = created.id
            break
    assert on_b is not None
    only_a = start_gateway(f"a={sims['a'].url}", slots=1)  # the same database: b was taken out
    client = openai.OpenAI(base_url=only_a.url + "/v1", api_key=key, max_retries=0)
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve(on_b)
    assert missing.value.body["code"] == "response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model=MODEL, input="more", previous_response_id=on_b)


def test_a_continuation_whose_backend_is_down_is_held_then_refused_without_stalling_others(
    start_sim, start_gateway, make_key
):
    sims = {name: start_sim(responses_store=True) for name in ("a", "b")}
    gateway = start_gateway(
        ",".join(f"{name}={sim.url}" for name, sim in sims.items()), slots=1, upstream_restart_hold_s=2
    )
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("agent"), max_retries=0)
    on_a = None
    for user in (f"conversation-{i}" for i in range(16)):
        created = client.responses.create(model=MODEL, input="Count to 2.", store=True, user=user)
        if httpx.get(f"{sims['a'].url}/v1/responses/{created.id}").is_success:
            on_a = created.id
            break
    assert on_a is not None
    sims["a"].stop()
    result: dict[str, object] = {}

    def follow_up() -> None:
        try:
            client.responses.create(model=MODEL, input="more", previous_response_id=on_a, timeout=30)
        except openai.APIStatusError as error:
            result["status"] = error.status_code

    import threading

    thread = threading.Thread(target=follow_up)
    thread.start()
    while thread.is_alive():  # the gateway keeps answering meanwhile (its event loop is not held)
        assert httpx.get(gateway.url + "/health", timeout=1).status_code == 200
        thread.join(0.2)
    assert result == {"status": 503}
