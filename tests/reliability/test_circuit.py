"""The backend's circuit breaker through real servers (the simulator answers what each request asks:
``#sim:status=N``): a 500 is about one request's input, so one key's failing requests never shut the
backend for another key; answers that show the backend is not serving (502, 503, 504) open it; its
state is shown in ``/admin/status`` and ``/metrics``."""

from __future__ import annotations

import httpx

from tests.support.probes import scrape

MODEL = "deepseek-v4-flash-0731"


def chat(gateway, key: str, text: str) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 4}
    auth = {"Authorization": f"Bearer {key}"}
    return httpx.post(gateway.url + "/v1/chat/completions", json=body, headers=auth, timeout=30)


def circuit(gateway, admin: str) -> str:
    status = httpx.get(gateway.url + "/admin/status", headers={"Authorization": f"Bearer {admin}"}).json()
    return str(status["backends"][0]["circuit"])


def test_one_keys_failing_requests_leave_the_circuit_closed_for_the_others(
    start_sim, start_gateway, make_key
) -> None:
    gateway = start_gateway(start_sim().url, upstream_restart_hold_s=0)
    failing, other, admin = make_key("failing"), make_key("other"), make_key("ops", scopes=["admin"])
    for _ in range(10):  # an input the backend fails on, sent again and again
        assert chat(gateway, failing, "#sim:status=500").status_code == 500
    answered = chat(gateway, other, "hello")
    assert answered.status_code == 200, answered.text  # at once: no 503, no wait for a cool-down
    assert circuit(gateway, admin) == "closed"
    for _ in range(3):  # the backend, or what is in front of it, is not serving
        assert chat(gateway, failing, "#sim:status=503").status_code == 503
    assert circuit(gateway, admin) == "open"
    refused = chat(gateway, other, "hello")
    assert refused.status_code == 503 and refused.json()["error"]["code"] == "upstream_unavailable"
    values = scrape(gateway.url)
    assert values["gateway_backend_circuit_state{backend=default,state=open}"] == 1
    assert values["gateway_backend_circuit_state{backend=default,state=closed}"] == 0
