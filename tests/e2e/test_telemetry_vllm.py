"""Acceptance telemetry cross-checked on a REAL vLLM with ngram speculation (k=3) and per-request metrics.

With the scripted model and a prompt that contains its own answer, ngram drafts are always right:
vLLM reports 3 steps, 9 of 9 drafts accepted. The three sources must agree: ``backend`` (vLLM's
per-request metrics) is exact; ``metrics_delta`` (vLLM's counters before/after a lone request) equals
it; ``stream`` (tokens per chunk) can only undercount steps — vLLM merges steps into one chunk when
its consumer lags — and its tokens must add up.
"""

from __future__ import annotations

import json

import httpx

from tests.support.probes import wait_until
from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer

CHAIN = "Let me think</think>Hello world"


def test_three_acceptance_sources_agree_on_a_lone_request(
    vllm_server: VLLMServer, start_gateway, make_key
) -> None:
    gateway = start_gateway(
        vllm_server.base_url,
        served_model=TINY_MODEL_NAME,
        spec_k=3,
        spec_counters="always",
        ledger_flush_s=0.1,
    )
    key, admin = make_key("spec"), make_key("admin", scopes=["admin"])
    payload = {
        "model": TINY_MODEL_NAME,
        "messages": [{"role": "user", "content": CHAIN}],
        "max_tokens": 50,
        "temperature": 0,
        "stream": True,
    }
    headers = {"Authorization": f"Bearer {key}", "x-gateway-telemetry": "1"}
    with httpx.stream(
        "POST", gateway.url + "/v1/chat/completions", json=payload, headers=headers, timeout=60
    ) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    telemetry = chunks[-1]["telemetry"]
    assert telemetry["completion_tokens"] == 12
    assert telemetry["spec"] == {
        "source": "backend",
        "steps": 3,
        "accepted_tokens": 9,
        "draft_tokens": 9,
        "acceptance_rate": 1.0,
        "mean_acceptance_length": 4.0,
    }
    auth = {"Authorization": f"Bearer {admin}"}

    def row() -> dict | None:
        data = httpx.get(gateway.url + "/admin/requests", headers=auth).json()["data"]
        return data[0] if data else None

    wait_until(lambda: row() is not None, what="ledger row")
    by_source = {c["source"]: c for c in row()["spec_candidates"]}
    backend, stream, delta = by_source["backend"], by_source["stream"], by_source["metrics_delta"]
    assert delta["exact"] is True
    assert {k: delta[k] for k in ("steps", "accepted_tokens", "draft_tokens")} == {
        k: backend[k] for k in ("steps", "accepted_tokens", "draft_tokens")
    }
    assert 1 <= stream["steps"] <= backend["steps"]
    assert (
        stream["steps"] + stream["accepted_tokens"] == telemetry["completion_tokens"] - 1
    )  # after the first
    assert row()["spec"]["source"] == "backend"
