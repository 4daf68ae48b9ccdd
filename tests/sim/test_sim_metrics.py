"""``/metrics`` names and arithmetic, and vLLM 0.32 per-request ``metrics``."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from tests.sim.helpers import STREAM_USAGE, chat_body, scrape, stream_chat

EXACT_NAMES = [
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:kv_cache_usage_perc",
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
]
SPEC_FIELDS = {
    "mean_acceptance_length",
    "draft_acceptance_rate",
    "acceptance_histogram",
    "num_spec_steps",
    "num_accepted_draft_tokens",
    "num_draft_tokens",
    "num_spec_tokens",
    "per_step_accepted",
    "per_step_drafted",
}


def test_exposed_names_are_vllms(sim):
    response = httpx.get(sim.base_url + "/metrics")
    assert response.headers["content-type"].startswith("text/plain")
    sample_names = {line.split("{")[0] for line in response.text.splitlines() if line and line[0] != "#"}
    for name in EXACT_NAMES:
        assert name in sample_names, name
    assert 'model_name="deepseek-v4-flash-0731"' in response.text
    for reason in ("stop", "length"):
        assert f'vllm:request_success_total{{finished_reason="{reason}",model_name=' in response.text


def test_counters_add_up(new_sim):
    server = new_sim(k=5)
    usages = [
        stream_chat(server.base_url, chat_body(f"count from 1 to {n}", **STREAM_USAGE))[-2]["usage"]
        for n in (10, 30, 60)
    ]
    cut = stream_chat(server.base_url, chat_body("count to 60", max_tokens=7, **STREAM_USAGE))[-2]["usage"]
    values = scrape(server.base_url)
    assert values["vllm:generation_tokens_total"] == sum(u["completion_tokens"] for u in [*usages, cut])
    assert values["vllm:prompt_tokens_total"] == sum(u["prompt_tokens"] for u in [*usages, cut])
    drafts = values["vllm:spec_decode_num_drafts_total"]
    assert values["vllm:spec_decode_num_draft_tokens_total"] == 5 * drafts
    accepted = values["vllm:spec_decode_num_accepted_tokens_total"]
    assert accepted == values["vllm:generation_tokens_total"] - drafts - 4  # one prefill token per request
    assert (
        sum(values[f"vllm:spec_decode_num_accepted_tokens_per_pos_total{{position={p}}}"] for p in range(5))
        == accepted
    )
    assert values["vllm:request_success_total{finished_reason=stop}"] == 3
    assert values["vllm:request_success_total{finished_reason=length}"] == 1


def test_per_request_metrics_non_stream(sim_metrics):
    body = httpx.post(
        sim_metrics.base_url + "/v1/chat/completions", json=chat_body("count from 1 to 40")
    ).json()
    metrics = body["metrics"]
    spec = metrics["speculative_decoding"]
    assert set(spec) == SPEC_FIELDS
    assert {
        "time_to_first_token_ms",
        "generation_time_ms",
        "queue_time_ms",
        "mean_itl_ms",
        "tokens_per_second",
    } <= set(metrics)
    completion = body["usage"]["completion_tokens"]
    assert spec["num_spec_steps"] + spec["num_accepted_draft_tokens"] + 1 == completion
    assert spec["num_draft_tokens"] == 5 * spec["num_spec_steps"] == sum(spec["per_step_drafted"])
    assert sum(spec["acceptance_histogram"]) == spec["num_spec_steps"]
    assert spec["mean_acceptance_length"] == pytest.approx(
        1 + spec["num_accepted_draft_tokens"] / spec["num_spec_steps"], abs=1e-3
    )


def test_per_request_metrics_stream_ride_on_usage_chunk(sim_metrics):
    events = stream_chat(sim_metrics.base_url, chat_body("count from 1 to 40", **STREAM_USAGE))
    *chunks, usage_chunk, done = events
    assert done == "[DONE]" and usage_chunk["choices"] == []
    assert all("metrics" not in chunk for chunk in chunks)
    spec = usage_chunk["metrics"]["speculative_decoding"]
    counts = [c["usage"]["completion_tokens"] for c in chunks]
    steps = [b - a for a, b in zip(counts[1:], counts[2:], strict=False)]  # after role + prefill chunks
    assert spec["per_step_accepted"] == [s - 1 for s in steps]


def test_per_request_metrics_only_when_enabled(sim):
    body = httpx.post(
        sim.base_url + "/v1/chat/completions", json=chat_body("count to 3", include_metrics=True)
    ).json()
    assert "metrics" not in body


def test_per_request_times_are_vllms_a_queued_requests_ttft_starts_when_it_is_scheduled(new_sim):
    """vLLM 0.32: ``queue_time_ms`` arrival → scheduled, ``time_to_first_token_ms`` scheduled → first
    token, ``tokens_per_second`` tokens / (scheduled → last token). The second of two requests on one
    slot waits the first one's whole generation, which its TTFT must not include."""
    server = new_sim(per_request_metrics=True, slots=1, decode_tps=400.0, ttft_base_s=0.02)
    body = chat_body("count from 1 to 40", max_tokens=40)
    url = server.base_url + "/v1/chat/completions"
    with ThreadPoolExecutor(2) as pool:
        answers = [r.json() for r in pool.map(lambda _: httpx.post(url, json=body, timeout=30), range(2))]
    ran, waited = sorted(answers, key=lambda answer: answer["metrics"]["queue_time_ms"])
    queued = waited["metrics"]
    assert queued["queue_time_ms"] > ran["metrics"]["generation_time_ms"] / 2  # it waited for the slot
    assert queued["time_to_first_token_ms"] < queued["queue_time_ms"]
    tokens = waited["usage"]["completion_tokens"]
    inference_s = (queued["time_to_first_token_ms"] + queued["generation_time_ms"]) / 1000
    assert queued["tokens_per_second"] == pytest.approx(tokens / inference_s, rel=1e-2)
