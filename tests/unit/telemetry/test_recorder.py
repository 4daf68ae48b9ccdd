"""RequestRecorder and acceptance maths on hand-made chunks, with an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gateway.dialects.openai.chunks import observation
from gateway.telemetry.record import RequestTelemetry
from gateway.telemetry.recorder import RequestRecorder
from gateway.telemetry.spec import ACCEPTED, DRAFT_TOKENS, DRAFTS, from_counters, from_stream


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def recorder(clock: Clock, k: int = 5) -> RequestRecorder:
    record = RequestTelemetry(
        request_id="r", key_id="k", key_name="team", model="m", route="/v1/chat/completions",
        api="chat", stream=True,
        arrived_at=datetime.now(UTC),
    )  # fmt: skip
    return RequestRecorder(record, k, clock)


def chunk(tokens: int, text: str = "", usage_extra: dict | None = None) -> dict:
    delta = {"content": text} if text else {"role": "assistant", "content": ""}
    return {
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        "usage": {"prompt_tokens": 10, "completion_tokens": tokens, **(usage_extra or {})},
    }


def seen(rec: RequestRecorder, obj: dict, reasoning_chars: int, content_chars: int) -> None:
    """One OpenAI stream chunk through the chat dialect's observer (:func:`observation`) into ``rec``."""
    rec.observe(observation(obj, obj["choices"], False, reasoning_chars, content_chars))


def test_timing_and_stream_acceptance() -> None:
    clock = Clock()
    rec = recorder(clock)
    clock.now = 101.0
    rec.admitted(1.0, {"slot": 1.0})
    clock.now = 101.5
    seen(rec, chunk(0), 0, 0)  # role chunk: not the first token
    clock.now = 102.0
    seen(rec, chunk(1, "a"), 0, 1)  # first token (prefill)
    for step_tokens, t in ((6, 102.1), (4, 102.2), (1, 102.3)):
        clock.now = t
        seen(rec, chunk(rec._tokens + step_tokens, "x"), 0, 1)
    clock.now = 103.0
    record = rec.finish(200, client_disconnected=False)
    assert record.queue_wait_s == 1.0
    assert record.upstream_ttft_s == pytest.approx(1.0) and record.ttft_s == pytest.approx(2.0)
    assert record.decode_tokens_per_s == pytest.approx((12 - 1) / 0.3)  # from usage, not chunk count
    assert record.e2e_s == pytest.approx(3.0)
    spec = record.spec
    assert spec is not None and spec.source == "stream"
    assert (spec.steps, spec.accepted_tokens, spec.draft_tokens) == (3, 8, 15)
    assert spec.acceptance_rate == pytest.approx(8 / 15, abs=1e-6)
    assert spec.mean_acceptance_length == pytest.approx(11 / 3, abs=1e-6)


def test_a_non_stream_ttft_from_the_backends_metrics_counts_from_arrival() -> None:
    """vLLM's figures start at the backend; before them the request was read and sized (0.2 s here)
    and queued (0.1 s): ttft_s = admission − arrival + upstream_ttft_s, not queue_wait_s + it."""
    clock = Clock()
    rec = recorder(clock)
    clock.now = 100.3
    rec.admitted(0.1, {"slot": 0.1})
    assert rec.admitted_s == pytest.approx(0.3)
    body = {
        "choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
        "metrics": {"time_to_first_token_ms": 40.0, "queue_time_ms": 10.0, "generation_time_ms": 100.0},
    }
    rec.observe_answer(observation(body, body["choices"], True, 0, 1))
    clock.now = 100.5
    record = rec.finish(200, client_disconnected=False)
    assert record.upstream_ttft_s == pytest.approx(0.05) and record.ttft_s == pytest.approx(0.35)
    assert record.queue_wait_s == 0.1


def test_impossible_values_are_clamped_and_named() -> None:
    rec = recorder(Clock())
    body = {
        "choices": [{"index": 0, "message": {"content": "x"}, "finish_reason": "stop"}],
        "usage": {
            "prompt_tokens": 5,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 9},
            "completion_tokens_details": {"reasoning_tokens": 7},
        },
    }
    rec.observe_answer(observation(body, body["choices"], True, 0, 1))
    record = rec.finish(200, client_disconnected=False)
    assert (record.cached_tokens, record.reasoning_tokens) == (5, 3)
    assert sorted(record.clamped) == ["cached_tokens", "reasoning_tokens"]


def test_reasoning_tokens_attributed_per_step_when_the_backend_reports_none() -> None:
    rec = recorder(Clock())
    seen(rec, chunk(4, "think"), 5, 0)  # 4 reasoning tokens
    seen(rec, chunk(10, "answer"), 2, 4)  # 6 tokens crossing the boundary: 2 of them reasoning
    record = rec.finish(200, client_disconnected=False)
    assert record.reasoning_tokens == 6 and record.completion_tokens == 10


def test_counter_delta_and_its_exactness() -> None:
    before = {ACCEPTED: 10, DRAFT_TOKENS: 50, DRAFTS: 10}
    after = {ACCEPTED: 19, DRAFT_TOKENS: 65, DRAFTS: 13}
    spec = from_counters(before, after, exact=True)
    assert spec is not None and (spec.steps, spec.accepted_tokens, spec.draft_tokens) == (3, 9, 15)
    assert spec.mean_acceptance_length == 4.0 and spec.as_dict()["exact"] is True
    assert from_counters(after, before, exact=True) is None  # went backwards: a restart, not a value
    assert from_counters({}, after, exact=True) is None
    assert from_stream([], 5) is None and from_stream([3], 0) is None
