"""Anthropic's Message Batches API (gateway/http/message_batches.py) on the gateway's batches, with the
official ``anthropic`` SDK as the client of a real gateway in front of the simulator: created, run as
the key's Messages requests, retrieved, listed, its results streamed in Anthropic's shape; a bad
request list refused at once in Anthropic's error shape; a cancel ends it with ``canceled`` results;
another key sees none of it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.probes import wait_until

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


def test_a_create_past_its_bounds_is_refused_in_anthropics_shape(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    """The body past GATEWAY_MESSAGE_BATCH_MAX_BYTES, or a request past a request body's shape bounds,
    is refused as it arrives (413 / 400, Anthropic's error shape, the bound named); nothing is kept."""
    files = tmp_path / "files"
    gateway = start_gateway(start_sim().url, files_dir=files, message_batch_max_bytes=64 * 1024)
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=make_key("owner"), max_retries=0)
    big = [request(f"b{n}", system="s" * 5_000) for n in range(20)]  # ~100 KiB
    wide = [request("ok"), request("wide", metadata={"x": [[] for _ in range(12_000)]})]
    deep: Any = []
    for _ in range(80):
        deep = [deep]
    for asked, status, kind, why in (
        (big, 413, "request_too_large", "larger than 65536 bytes"),
        (wide, 413, "request_too_large", "requests.1 holds more than 10000 objects and arrays"),
        ([request("deep", metadata={"x": deep})], 400, "invalid_request_error", "requests.0 is nested more"),
    ):
        with pytest.raises(anthropic.APIStatusError, match=why) as refused:
            claude.messages.batches.create(requests=asked)  # type: ignore[arg-type]
        assert refused.value.status_code == status
        assert refused.value.body["type"] == "error" and refused.value.body["error"]["type"] == kind
    assert list(claude.messages.batches.list()) == []
    assert [p.name for p in files.iterdir() if p.is_file()] == []  # no upload left behind


def test_a_create_is_kept_as_it_arrives_and_a_key_makes_one_at_a_time(
    start_sim, start_gateway, make_key, tmp_path: Path
) -> None:
    """A create whose body is held open half sent: the requests that arrived are in the input file
    already (the body is not held whole), a second create of the same key is refused 429 meanwhile,
    another key's create is made; once the rest arrives the first is made and runs."""
    files = tmp_path / "files"
    gateway = start_gateway(start_sim().url, files_dir=files)
    first_key = make_key("first")
    claude = anthropic.Anthropic(base_url=gateway.url, api_key=first_key, max_retries=0)
    other = anthropic.Anthropic(base_url=gateway.url, api_key=make_key("other"), max_retries=0)
    # the first half past a file buffer's 8 KiB, so what was written is on disk
    asked = [json.dumps(request(f"r{n}", system="s" * 1_000)).encode() for n in range(40)]
    go, answer = threading.Event(), {}

    def body() -> Iterator[bytes]:
        yield b'{"requests": [' + b",".join(asked[:20]) + b","
        go.wait(60)
        yield b",".join(asked[20:]) + b"]}"

    def send() -> None:
        headers = {
            "x-api-key": first_key,
            "anthropic-version": "2023-06-01",
            "content-type": "application/json",
        }
        with httpx.Client(timeout=60) as http:
            answer["made"] = http.post(gateway.url + "/v1/messages/batches", content=body(), headers=headers)

    sending = threading.Thread(target=send)
    sending.start()
    try:

        def written() -> bool:
            return any(p.name.startswith(".upload-") and p.stat().st_size > 0 for p in files.iterdir())

        wait_until(lambda: files.is_dir() and written(), timeout_s=60, what="the first requests written")
        with pytest.raises(anthropic.RateLimitError, match="being created") as refused:
            claude.messages.batches.create(requests=[request("again")])  # type: ignore[list-item]
        assert refused.value.body["error"]["type"] == "rate_limit_error"
        made_other = other.messages.batches.create(requests=[request("o")])  # type: ignore[list-item]
        assert made_other.processing_status == "in_progress"
    finally:
        go.set()
        sending.join()
    made = answer["made"]
    assert made.status_code == 200, made.text
    done = ended(claude, made.json()["id"])
    assert done.request_counts.succeeded == 40
    assert ended(other, made_other.id).request_counts.succeeded == 1
