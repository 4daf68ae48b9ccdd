"""Reading vLLM's /metrics page (gateway/backends/monitor.py): only the samples asked for, summed over
label sets, from a page shaped like vLLM's (typed families, histograms, several engines)."""

from __future__ import annotations

from gateway.backends.monitor import GAUGES, parse_samples
from gateway.telemetry.spec import COUNTERS

PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 1.0
vllm:num_requests_running{engine="1",model_name="m"} 1.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
# HELP vllm:spec_decode_num_accepted_tokens Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 120.0
vllm:spec_decode_num_accepted_tokens_created{engine="0",model_name="m"} 1.7e9
# TYPE vllm:spec_decode_num_draft_tokens counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 200.0
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 40.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 7.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 7.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 0.7
"""


def test_only_the_samples_asked_for_summed_over_label_sets() -> None:
    assert parse_samples(PAGE, GAUGES) == {
        "vllm:num_requests_running": 2.0,
        "vllm:num_requests_waiting": 3.0,
        "vllm:kv_cache_usage_perc": 0.25,
    }
    assert parse_samples(PAGE, COUNTERS) == {
        "vllm:spec_decode_num_accepted_tokens_total": 120.0,
        "vllm:spec_decode_num_draft_tokens_total": 200.0,
        "vllm:spec_decode_num_drafts_total": 40.0,
    }
    assert parse_samples(PAGE, ("vllm:time_to_first_token_seconds_count",)) == {
        "vllm:time_to_first_token_seconds_count": 7.0
    }
    assert parse_samples(PAGE, ("vllm:absent",)) == {}
