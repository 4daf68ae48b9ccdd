"""Telemetry through a real gateway and simulator: client-facing objects, usage stripping, request ids,
Prometheus families, the ledger and the admin routes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from gateway.telemetry.record import CLIENT_FIELDS
from tests.support.probes import scrape, wait_until

MODEL = "deepseek-v4-flash-0731"
CANARY = "canary-prompt-7f3a9c"


def body(text: str = "count from 1 to 40", **extra) -> dict:
    return {"model": MODEL, "messages": [{"role": "user", "content": text}], **extra}


def events(response: httpx.Response) -> list:
    return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: {")]


def stream(gateway, key: str, payload: dict, headers: dict | None = None) -> tuple[httpx.Response, list]:
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        json={**payload, "stream": True},
        headers={"Authorization": f"Bearer {key}", **(headers or {})},
    ) as response:
        return response, events(response)


@pytest.fixture
def stack(start_sim, start_gateway, make_key):
    sim = start_sim(decode_tps=500, k=5, acceptance=0.7)
    gateway = start_gateway(sim.url, backend_poll_s=0.1, ledger_flush_s=0.1)
    return sim, gateway, make_key("team-a"), make_key("root", scopes=["admin"])


def assert_sane(telemetry: dict, source: str) -> None:
    assert set(telemetry) == {*CLIENT_FIELDS, "spec"}
    assert telemetry["request_id"].startswith("req-")
    assert 0 <= telemetry["queue_wait_s"] <= telemetry["ttft_s"] <= telemetry["e2e_s"]
    assert 0 < telemetry["upstream_ttft_s"] <= telemetry["ttft_s"]
    assert telemetry["decode_tokens_per_s"] > 0
    assert telemetry["completion_tokens"] > 1 and telemetry["prompt_tokens"] > 0
    spec = telemetry["spec"]
    assert spec["source"] == source
    assert spec["steps"] > 0 and spec["draft_tokens"] == 5 * spec["steps"]
    assert 0 <= spec["acceptance_rate"] <= 1 and 1 <= spec["mean_acceptance_length"] <= 6
    assert spec["steps"] + spec["accepted_tokens"] + 1 == telemetry["completion_tokens"]


def test_stream_telemetry_and_usage_only_as_asked(stack) -> None:
    _, gateway, key, _ = stack
    response, plain = stream(gateway, key, body())
    assert all("usage" not in c and "telemetry" not in c for c in plain)
    assert all(c["choices"] for c in plain)  # no usage chunk the client did not ask for
    _, final_only = stream(gateway, key, body(stream_options={"include_usage": True}))
    assert [("usage" in c) for c in final_only] == [False] * (len(final_only) - 1) + [True]
    _, every = stream(
        gateway, key, body(stream_options={"include_usage": True, "continuous_usage_stats": True})
    )
    assert all("usage" in c for c in every)
    response, told = stream(gateway, key, body(), headers={"x-gateway-telemetry": "1"})
    final = told[-1]
    assert final["choices"] == [] and "usage" not in final
    assert_sane(final["telemetry"], source="stream")
    assert final["telemetry"]["request_id"] == response.headers["x-request-id"]


def test_non_stream_telemetry_and_request_id(stack) -> None:
    _, gateway, key, _ = stack
    headers = {"Authorization": f"Bearer {key}", "x-gateway-telemetry": "1", "x-request-id": "my-trace-42"}
    response = httpx.post(gateway.url + "/v1/chat/completions", json=body(), headers=headers)
    assert response.headers["x-request-id"].startswith("req-")  # the gateway's, never the client's
    telemetry = response.json()["telemetry"]
    assert telemetry["request_id"] == response.headers["x-request-id"]
    assert telemetry["completion_tokens"] == response.json()["usage"]["completion_tokens"]
    assert "metrics" not in response.json()
    bad_id = httpx.post(
        gateway.url + "/v1/chat/completions",
        json=body(),
        headers={"Authorization": f"Bearer {key}", "x-request-id": "evil\tid" + "x" * 300},
    )
    assert bad_id.headers["x-request-id"].startswith("req-")


def test_backend_per_request_metrics_are_the_best_source(start_sim, start_gateway, make_key) -> None:
    sim = start_sim(per_request_metrics=True, decode_tps=500)
    gateway = start_gateway(sim.url, spec_counters="always")
    key = make_key("k")
    _, chunks = stream(
        gateway,
        key,
        body(include_metrics=True, stream_options={"include_usage": True}),
        headers={"x-gateway-telemetry": "1"},
    )
    final = chunks[-1]
    assert_sane(final["telemetry"], source="backend")
    backend = final["metrics"]["speculative_decoding"]  # asked for: passed on
    assert final["telemetry"]["spec"]["accepted_tokens"] == backend["num_accepted_draft_tokens"]
    wait_until(
        lambda: len(admin_requests(gateway, make_key("adm", scopes=["admin"]))) == 1, what="ledger row"
    )
    row = admin_requests(gateway, make_key("adm2", scopes=["admin"]))[0]
    by_source = {c["source"]: c for c in row["spec_candidates"]}
    assert set(by_source) == {"backend", "stream", "metrics_delta"}
    assert by_source["metrics_delta"]["exact"] is True
    for source in ("stream", "metrics_delta"):  # a lone request: all three sources agree exactly
        for field in ("steps", "accepted_tokens", "draft_tokens"):
            assert by_source[source][field] == by_source["backend"][field], (source, field)
    _, hidden = stream(gateway, key, body(stream_options={"include_usage": True}))
    assert "metrics" not in hidden[-1]


def admin_requests(gateway, admin_key: str, limit: int = 50) -> list:
    response = httpx.get(
        gateway.url + "/admin/requests",
        params={"limit": limit},
        headers={"Authorization": f"Bearer {admin_key}"},
    )
    assert response.status_code == 200, response.text
    return response.json()["data"]


def test_prometheus_families_and_backend_gauges(stack) -> None:
    sim, gateway, key, _ = stack
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0)
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "count from 1 to 20"}])
    for _ in client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=True
    ):
        pass
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    ok = f"gateway_requests_total{{api=chat,key=team-a,model={MODEL},status=200}}"
    wait_until(lambda: scrape(gateway.url).get(ok) == 2, what="the stream's record (published as it closes)")
    values = scrape(gateway.url)
    unknown = "gateway_requests_total{api=chat,key=team-a,model=unknown,status=404}"
    assert values[unknown] == 1  # bounded label
    for kind in ("prompt", "completion", "reasoning"):
        assert values[f"gateway_tokens_total{{api=chat,key=team-a,kind={kind},model={MODEL}}}"] > 0
    for family in ("ttft_seconds", "queue_wait_seconds", "decode_tokens_per_second", "e2e_seconds"):
        assert values[f"gateway_{family}_count{{api=chat,key=team-a,model={MODEL}}}"] >= 1
    assert values["gateway_spec_acceptance_rate_count"] == 2  # both answered requests, whatever the source
    wait_until(lambda: scrape(gateway.url).get("gateway_upstream_up") == 1, what="backend poll")
    assert "gateway_backend_kv_cache_usage_ratio" in scrape(gateway.url)
    assert not [name for name in values if "dsk-" in name or key in name]  # key names, never keys


def test_metrics_token(start_sim, start_gateway) -> None:
    sim = start_sim()
    gateway = start_gateway(sim.url, metrics_token="s3cret-0123456789")
    assert httpx.get(gateway.url + "/metrics").status_code == 401
    assert httpx.get(gateway.url + "/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert "gateway_slots_total" in scrape(gateway.url, headers={"Authorization": "Bearer s3cret-0123456789"})


def test_metrics_without_a_token_answer_this_host_only(start_sim, start_gateway) -> None:
    """No ``GATEWAY_METRICS_TOKEN``: a local Prometheus reads ``/metrics``; a request relayed by a
    proxy — from the internet through a trusted one, or from loopback by a same-host proxy that is
    not trusted — gets 403 in OpenAI shape, key names unseen."""
    gateway = start_gateway(start_sim().url, trusted_proxies="127.0.0.1")
    assert "gateway_slots_total" in scrape(gateway.url)
    for relayed in ({"X-Forwarded-For": "203.0.113.9"}, {"Forwarded": "for=203.0.113.9"}):
        refused = httpx.get(gateway.url + "/metrics", headers=relayed)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "metrics_local_only"
        assert "gateway_" not in refused.text


def test_ledger_admin_routes_and_cli(stack, database_url: str, tmp_path: Path) -> None:
    _, gateway, key, admin = stack
    auth = {"Authorization": f"Bearer {key}"}
    for i in range(3):
        httpx.post(gateway.url + "/v1/chat/completions", json=body(f"{CANARY} {i}"), headers=auth)
    stream(gateway, key, body(CANARY))
    assert httpx.get(gateway.url + "/admin/usage", headers=auth).status_code == 403
    admin_auth = {"Authorization": f"Bearer {admin}"}
    # a stream's record is published as its exchange closes, just after the client read its end
    wait_until(lambda: len(admin_requests(gateway, admin)) == 4, what="the stream's record")
    usage = httpx.get(gateway.url + "/admin/usage?group_by=key", headers=admin_auth).json()["data"]
    assert [(u["key"], u["requests"]) for u in usage] == [("team-a", 4)]
    assert usage[0]["completion_tokens"] > 0
    by_model = httpx.get(gateway.url + "/admin/usage?group_by=model", headers=admin_auth).json()["data"]
    assert by_model[0]["model"] == MODEL
    days = httpx.get(gateway.url + "/admin/usage?group_by=day&since=2020-01-01T00:00:00Z", headers=admin_auth)
    assert days.json()["data"][0]["requests"] == 4
    recent_day = httpx.get(gateway.url + "/admin/usage?group_by=key&since=1h", headers=admin_auth).json()[
        "data"
    ]
    assert recent_day[0]["requests"] == 4
    offset = httpx.get(
        gateway.url + "/admin/usage", params={"since": "2999-01-01T02:00:00+02:00"}, headers=admin_auth
    )
    assert offset.json()["data"] == []
    bad = httpx.get(gateway.url + "/admin/usage?since=yesterday", headers=admin_auth)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "since"
    assert bad.json()["error"]["message"] == (
        "since must be a positive duration like 7d or an ISO 8601 time; got 'yesterday'"
    )
    recent = admin_requests(gateway, admin)
    assert len(recent) == 4 and {r["status"] for r in recent} == {200}
    dump = json.dumps(recent)
    assert CANARY not in dump and key not in dump
    cli = Path(sys.executable).parent / "dspark-gateway"
    table = subprocess.run(
        [str(cli), "usage", "--database-url", database_url, "--since", "1d"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "team-a" in table and " 4 " in table


def test_client_disconnect_is_recorded(stack) -> None:
    sim, gateway, key, admin = stack
    with httpx.stream(
        "POST",
        gateway.url + "/v1/chat/completions",
        json=body("long", stream=True, max_tokens=400),
        headers={"Authorization": f"Bearer {key}"},
    ) as response:
        lines = response.iter_lines()
        next(lines)
    wait_until(lambda: len(admin_requests(gateway, admin)) == 1, what="ledger row")
    (row,) = admin_requests(gateway, admin)
    assert row["client_disconnected"] is True and row["status"] == 499


def test_queued_streams_read_to_their_last_event_are_recorded_whole(start_sim, start_gateway, make_key):
    """The OpenAI SDK stops reading at ``data: [DONE]`` and closes the connection, often before the
    gateway has ended the response: an answer whose last event was written is delivered (200), not
    a 499. Five SDK clients loop on two slots, so most streams wait in the queue first."""
    sim = start_sim(slots=2, decode_tps=400)
    gateway = start_gateway(sim.url, slots=2, ledger_flush_s=0.1)
    admin = make_key("root", scopes=["admin"])
    client = openai.OpenAI(base_url=gateway.url + "/v1", api_key=make_key("looping"), max_retries=0)
    create = client.chat.completions.create
    deadline = time.monotonic() + 6

    def loop(i: int) -> int:
        whole = 0
        while time.monotonic() < deadline:
            messages = [{"role": "user", "content": f"client {i}"}]
            stream = create(model=MODEL, messages=messages, max_tokens=20, stream=True)
            chunks = list(stream)
            whole += any(c.choices and c.choices[0].finish_reason for c in chunks)
        return whole

    with ThreadPoolExecutor(5) as pool:
        whole = sum(pool.map(loop, range(5)))
    rows = lambda: admin_requests(gateway, admin, limit=1000)  # noqa: E731
    wait_until(lambda: len(rows()) == whole, what="a row per request")
    assert {(row["status"], row["end_reason"]) for row in rows()} == {(200, "complete")}
    assert scrape(gateway.url).get("gateway_request_ends_total{end=client_gone}", 0) == 0
