"""Route allow-list, authentication and model checks, through a real gateway in front of the simulator."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime, timedelta
from unittest.mock import ANY

import httpx
import openai
import pytest
from fastapi.routing import APIRoute
from starlette.routing import Mount, Route

from gateway.app.routes import PUBLIC_MOUNTS, PUBLIC_ROUTES, ROUTES
from tests.support.probes import scrape

MODEL = "deepseek-v4-flash-0731"
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


ANY_AUTHENTICATION_ERROR = {"type": "authentication_error", "message": ANY}


def assert_openai_error(response: httpx.Response, status: int, code: str | None) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"]
    assert error["code"] == code
    return error


@pytest.fixture
def stack(start_sim, start_gateway):
    sim = start_sim()
    return sim, start_gateway(sim.url)


def test_openai_sdk_round_trip(stack, make_key) -> None:
    _, gateway = stack
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("sdk"), max_retries=0)
    (model,) = client.models.list().data
    assert model.id == MODEL
    reply = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "count to 5"}])
    assert reply.choices[0].message.content
    assert reply.choices[0].message.model_extra["reasoning"]
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hello"}], stream=True
    )
    deltas = [c.choices[0].delta for c in stream if c.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas)
    text = client.completions.create(model=MODEL, prompt="Say hi", max_tokens=5)
    assert text.choices[0].text and text.usage.completion_tokens == 5


def test_authentication_failures_are_401_in_openai_shape(stack, make_key, revoke_key) -> None:
    _, gateway = stack
    revoked = make_key("revoked")
    expired = make_key("expired", expires_at=datetime.now(UTC) - timedelta(minutes=1))
    revoke_key("revoked")
    url = gateway.url + "/v1/chat/completions"
    for headers in [
        {},
        {"Authorization": "Token abc"},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer dsk-unknown"},
        {"Authorization": "Bearer dsk-" + "x" * 43},
        {"Authorization": f"Bearer {revoked}"},
        {"Authorization": f"Bearer {expired}"},
    ]:
        error = assert_openai_error(httpx.post(url, json=CHAT, headers=headers), 401, "invalid_api_key")
        assert error["type"] == "authentication_error"
    # the SDK maps it to its own exception type
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key="dsk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        client.models.list()


def test_model_checks(stack, make_key) -> None:
    _, gateway = stack
    limited = make_key("limited", models=["some-other-model"])
    anyone = make_key("anyone")
    url = gateway.url + "/v1/chat/completions"
    forbidden = httpx.post(url, json=CHAT, headers={"Authorization": f"Bearer {limited}"})
    assert assert_openai_error(forbidden, 403, "model_not_allowed")["param"] == "model"
    unknown = httpx.post(url, json={**CHAT, "model": "gpt-4"}, headers={"Authorization": f"Bearer {anyone}"})
    assert_openai_error(unknown, 404, "model_not_found")
    listing = httpx.get(gateway.url + "/v1/models", headers={"Authorization": f"Bearer {limited}"})
    assert listing.json()["data"] == []


def test_bad_body_is_400_in_openai_shape(stack, make_key) -> None:
    _, gateway = stack
    headers = {"Authorization": f"Bearer {make_key('k')}"}
    url = gateway.url + "/v1/chat/completions"
    assert_openai_error(httpx.post(url, content=b"{not json", headers=headers), 400, "invalid_request")
    missing = httpx.post(url, json={"model": MODEL}, headers=headers)
    assert assert_openai_error(missing, 400, "invalid_request")["param"] == "messages"
    empty = httpx.post(url, json={**CHAT, "messages": []}, headers=headers)
    assert_openai_error(empty, 400, "invalid_request")


@pytest.mark.parametrize(
    "method,path",
    [
        ("POST", "/tokenize"),
        ("POST", "/detokenize"),
        ("POST", "/invocations"),
        ("POST", "/pause"),
        ("GET", "/version"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/score"),
        ("POST", "/v1/responses/resp_1/input_items"),
        ("GET", "/v1/../tokenize"),
        ("GET", "/v1/%2e%2e/tokenize"),
        ("POST", "//v1/chat/completions"),
    ],
)
def test_other_paths_are_404_and_never_reach_vllm(stack, make_key, method, path) -> None:
    sim, gateway = stack
    key = make_key("k")
    with httpx.Client(base_url=gateway.url) as client:
        request = client.build_request(method, path, json=CHAT, headers={"Authorization": f"Bearer {key}"})
        request.url = httpx.URL(gateway.url + path)  # keep the raw path: no client-side normalisation
        response = client.send(request)
    assert response.status_code in (404, 405)
    code = "not_found" if response.status_code == 404 else "method_not_allowed"
    assert_openai_error(response, response.status_code, code)
    assert scrape(sim.url).get("vllm:prompt_tokens_total", 0) == 0


def test_every_route_but_the_public_ones_is_a_401_without_credentials(stack) -> None:
    """Deny by default: each route of the app (the route table's and FastAPI's own), each of its
    methods, without credentials, answers 401 in its dialect's shape (Anthropic's on ``/v1/messages``,
    OpenAI's elsewhere) unless it is in ``PUBLIC_ROUTES``; a console page sends the browser to its
    sign-in page; the only other things mounted are the public static files of ``PUBLIC_MOUNTS``."""
    _, gateway = stack
    routes = [r for r in gateway.app.routes if isinstance(r, APIRoute | Route)]
    others = [r for r in gateway.app.routes if r not in routes]
    assert all(isinstance(r, Mount) for r in others) and {r.path for r in others} == PUBLIC_MOUNTS
    assert {r.path for r in routes} >= PUBLIC_ROUTES | {route.path for route in ROUTES}
    checked = consoled = 0
    # an inference route is served by its plain ASGI route, documented by a FastAPI one on the same path
    for method, template in sorted({(method, r.path) for r in routes for method in r.methods or ()}):
        path = re.sub(r"\{[a-z_]+\}", "x_1", template)
        response = httpx.request(method, gateway.url + path, json={})
        if template in PUBLIC_ROUTES:  # the console's sign-in answers a 401 page to a bad key
            assert response.status_code != 401 or template == "/console/login", (method, template)
            continue
        if template.startswith("/console"):
            assert response.status_code == 303, (method, template)
            assert response.headers["location"] == "/console/login"
            consoled += 1
            continue
        if template.startswith("/v1/messages"):
            assert response.status_code == 401, (method, template)
            assert response.json() == {"type": "error", "error": ANY_AUTHENTICATION_ERROR}
        else:
            assert_openai_error(response, 401, "invalid_api_key")
        checked += 1
    assert checked == len(ROUTES) - len({r.path for r in ROUTES} & PUBLIC_ROUTES)
    assert consoled == 25  # every console page but its sign-in (the fallback page included)


def test_inference_routes_go_through_the_middleware(stack, make_key) -> None:
    """Request ids, HTTP metrics by route, the route's 405 for other methods."""
    _, gateway = stack
    key = make_key("fast")
    url = gateway.url + "/v1/chat/completions"
    ok = httpx.post(url, json=CHAT, headers={"Authorization": f"Bearer {key}", "x-request-id": "trace-1"})
    assert ok.status_code == 200 and ok.headers["x-request-id"].startswith("req-")  # the gateway's own
    refused = httpx.post(url, json=CHAT, headers={"Authorization": "Bearer dsk-unknown"})
    assert_openai_error(refused, 401, "invalid_api_key")
    assert refused.headers["x-request-id"].startswith("req-")
    assert_openai_error(httpx.get(url, headers={"Authorization": f"Bearer {key}"}), 405, "method_not_allowed")
    values = scrape(gateway.url)
    route = "handler=/v1/chat/completions,method=POST"
    assert values[f"http_requests_total{{{route},status=2xx}}"] == 1
    assert values[f"http_requests_total{{{route},status=4xx}}"] == 1


def test_a_database_failure_is_a_503_in_openai_shape(stack, make_key, database_url) -> None:
    """The key table vanishing under the gateway (a database failure) is not a plain-text 500."""
    _, gateway = stack
    key = make_key("db-gone")
    with sqlite3.connect(database_url.removeprefix("sqlite+aiosqlite:///")) as db:
        db.execute("DROP TABLE api_keys")
    for method, path, body in (("POST", "/v1/chat/completions", CHAT), ("GET", "/v1/models", None)):
        headers = {"Authorization": f"Bearer {key}"}
        failed = httpx.request(method, gateway.url + path, headers=headers, json=body)
        assert_openai_error(failed, 503, "database_unavailable")
    assert httpx.get(gateway.url + "/health").status_code == 200


def test_metrics_are_the_gateways_own(stack) -> None:
    _, gateway = stack
    values = scrape(gateway.url)
    assert values["gateway_slots_total"] == 2
    assert values["gateway_slots_in_use"] == 0
    assert not [name for name in values if name.startswith("vllm:")]


def test_health_and_ready(start_sim, start_gateway) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url)
    assert httpx.get(gateway.url + "/health").json() == {"status": "ok"}
    assert httpx.get(gateway.url + "/ready").status_code == 200
    sim.stop()
    assert_openai_error(httpx.get(gateway.url + "/ready"), 503, "upstream_unavailable")
    assert httpx.get(gateway.url + "/health").status_code == 200


def test_output_that_can_never_fit_the_kv_pool_is_refused_at_once(stack, make_key) -> None:
    sim, gateway = stack
    headers = {"Authorization": f"Bearer {make_key('big')}"}
    huge = httpx.post(
        gateway.url + "/v1/chat/completions", json={**CHAT, "max_tokens": 2_000_000}, headers=headers
    )
    assert assert_openai_error(huge, 400, "context_length_exceeded")["param"] == "max_tokens"
    assert scrape(sim.url).get("vllm:prompt_tokens_total", 0) == 0  # never sent to the backend


def test_slots_and_kv_budget_default_from_the_runtime_profile() -> None:
    from gateway.config import Settings

    balanced, throughput = Settings(runtime_profile="balanced"), Settings(runtime_profile="throughput")
    assert (balanced.slots, balanced.kv_budget_tokens) == (2, 1_372_579)
    assert throughput.slots == 6  # its KV capacity was never measured: the budget stays as configured
    assert Settings(runtime_profile="throughput", slots=3).slots == 3  # an explicit setting wins


def test_oversized_bodies_are_413_before_they_are_parsed(start_sim, start_gateway, make_key) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url, max_body_bytes=4096)
    headers = {"Authorization": f"Bearer {make_key('big-body')}"}
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 5000}]}
    declared = httpx.post(gateway.url + "/v1/chat/completions", json=big, headers=headers)
    assert_openai_error(declared, 413, "request_too_large")

    def chunked():  # no Content-Length: the limit holds on the bytes as they arrive
        yield b'{"model": "deepseek-v4-flash-0731", "messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}]}'

    streamed = httpx.post(gateway.url + "/v1/chat/completions", content=chunked(), headers=headers)
    assert_openai_error(streamed, 413, "request_too_large")
    assert httpx.post(gateway.url + "/v1/chat/completions", json=CHAT, headers=headers).status_code == 200
    assert 0 < scrape(sim.url)["vllm:prompt_tokens_total"] < 100  # only the small one reached it
