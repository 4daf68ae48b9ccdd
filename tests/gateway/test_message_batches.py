"""Anthropic's Message Batches API (gateway/http/message_batches.py) on the gateway's batches, with the
official ``anthropic`` SDK as the client of a real gateway in front of the simulator: created, run as
the key's Messages requests, retrieved, listed, its results streamed in Anthropic's shape; a bad
request list refused at once in Anthropic's error shape; a cancel ends it with ``canceled`` results;
another key sees none of it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anthropic
import pytest

MODEL = "deepseek-v4-flash-0731"


def request(custom_id: str, **params: Any) -> dict[str, Any]:
    asked = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": f"Say {custom_id}."}]}
    return {"custom_id": custom_id, "params": {**asked, **params}}


def ended(client: anthropic.Anthropic, batch_id: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        batch = client.messages.batches.retrieve(batch_id)
        if batch.processing_status == "ended":
            return batch
        time.sleep(0.1)
    raise AssertionError(f"{batch_id} still {batch.processing_status}")


def test_a_message_batch_runs_and_streams_anthropics_results(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    gateway = start_gateway(start_sim().url, files_dir=tmp_path / "files")
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=make_key("owner"), max_retries=0)
    other = anthropic.Anthropic(base_url=gateway.url, api_key=make_key("other"), max_retries=0)
    asked = [request(f"q{n}") for n in range(5)] + [request("bad", model="no-such-model")]
    made = claude.messages.batches.create(requests=asked)  # type: ignore[arg-type]
    assert made.id.startswith("msgbatch_") and made.type == "message_batch"
    assert made.processing_status == "in_progress" and made.results_url is None
    with pytest.raises(anthropic.NotFoundError):
        other.messages.batches.retrieve(made.id)

    done = ended(claude, made.id)
    counts = done.request_counts
    assert (counts.succeeded, counts.errored, counts.processing, counts.canceled) == (5, 1, 0, 0)
    assert done.ended_at is not None and done.results_url.endswith(f"/v1/messages/batches/{made.id}/results")
    results = {r.custom_id: r.result for r in claude.messages.batches.results(made.id)}
    assert sorted(results) == ["bad", "q0", "q1", "q2", "q3", "q4"]
    for custom_id in ("q0", "q4"):
        message = results[custom_id]
        assert message.type == "succeeded" and message.message.role == "assistant"
        assert message.message.content and message.message.usage.output_tokens > 0
    assert results["bad"].type == "errored" and results["bad"].error.error.type == "not_found_error"
    assert [b.id for b in claude.messages.batches.list()] == [made.id]
    assert list(other.messages.batches.list()) == []


def test_bad_requests_are_refused_at_once_and_a_cancel_ends_the_rest(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    gateway = start_gateway(start_sim(decode_tps=40).url, files_dir=tmp_path / "files")
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=make_key("owner"), max_retries=0)
    for bad, why in (
        ([request("a"), request("a")], "used by an earlier line"),
        ([request("has space")], "custom_id must be 1 to 64"),
        ([request("s", stream=True)], "cannot stream"),
        ([], "requests must be a list"),
    ):
        with pytest.raises(anthropic.BadRequestError, match=why) as refused:
            claude.messages.batches.create(requests=bad)  # type: ignore[arg-type]
        assert refused.value.body["type"] == "error"  # Anthropic's shape
    assert list(claude.messages.batches.list()) == []

    made = claude.messages.batches.create(requests=[request(f"c{n}") for n in range(60)])  # type: ignore[arg-type]
    deadline = time.monotonic() + 30
    while (
        claude.messages.batches.retrieve(made.id).request_counts.succeeded < 2 and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    assert claude.messages.batches.cancel(made.id).processing_status in ("canceling", "ended")
    done = ended(claude, made.id)
    assert done.cancel_initiated_at is not None and done.request_counts.canceled > 0
    kinds = [r.result.type for r in claude.messages.batches.results(made.id)]
    assert len(kinds) == 60 and set(kinds) == {"succeeded", "canceled"}
    assert kinds.count("canceled") == done.request_counts.canceled
