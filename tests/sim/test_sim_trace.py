"""``SimConfig.trace_file`` (``--trace-file``): one JSON line per sequence leaving the engine, through a
real server; off by default."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

import httpx

from dspark_sim import SimConfig, SimServer
from dspark_sim.sequence import Sequence
from dspark_sim.state import SimState
from dspark_sim.trace import SequenceTrace
from tests.sim.helpers import FAST, chat_body, wait_for


def read_trace(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_trace_is_off_by_default(tmp_path):
    assert SimState.build(SimConfig(**FAST)).trace is None
    assert list(tmp_path.iterdir()) == []


def test_one_line_per_sequence_with_ordered_monotonic_times(tmp_path):
    path = tmp_path / "trace.jsonl"
    before = time.monotonic()
    with (
        SimServer(SimConfig(**FAST, slots=2, trace_file=str(path))) as server,
        httpx.Client(base_url=server.base_url, timeout=30) as client,
    ):
        for index in range(4):
            body = chat_body(f"request {index}", max_tokens=7, ignore_eos=True)
            response = client.post("/v1/chat/completions", json=body, headers={"x-request-id": f"t{index}"})
            assert response.status_code == 200
    after = time.monotonic()  # the server stopped: everything is flushed
    lines = read_trace(path)
    assert [line["request_id"].split("-")[1] for line in lines] == ["t0", "t1", "t2", "t3"]
    for line in lines:
        assert set(line) == {
            "request_id",
            "arrival",
            "scheduled",
            "first_token",
            "finish",
            "preemptions",
            "priority",
            "prompt_tokens",
            "output_tokens",
            "reason",
        }
        # the simulator's monotonic clock is this process's: the machine's CLOCK_MONOTONIC
        assert (
            before <= line["arrival"] <= line["scheduled"] <= line["first_token"] <= line["finish"] <= after
        )
        assert (line["output_tokens"], line["reason"]) == (7, "length")
    assert all(a["finish"] <= b["arrival"] for a, b in zip(lines, lines[1:], strict=False))  # one at a time


def test_lines_are_flushed_while_serving_and_aborts_are_traced(tmp_path, new_sim):
    path = tmp_path / "trace.jsonl"
    server = new_sim(slots=1, decode_tps=100, trace_file=str(path))
    with (
        httpx.Client(base_url=server.base_url, timeout=30) as client,
        client.stream(
            "POST", "/v1/chat/completions", json=chat_body("count from 1 to 5000", stream=True)
        ) as r,
    ):
        events = r.iter_lines()
        next(events)  # running: then leave mid-stream
    wait_for(lambda: len(read_trace(path)) == 1, timeout_s=5, what="the abort's line (periodic flush)")
    (line,) = read_trace(path)
    assert line["reason"] == "abort" and 0 < line["output_tokens"] < 5000


def test_trace_appends_and_stops_after_close(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"earlier": "run"}\n')
    trace = SequenceTrace(path)
    seq = Sequence(
        request_id="a", prompt_tokens=3, output_tokens=2, finish_reason="stop", rng=random.Random(0)
    )
    trace.on_finish(seq, "abort")  # no event loop running here: written at once
    assert read_trace(path)[1]["scheduled"] is None
    trace.close()
    trace.on_finish(seq, "stop")
    trace.close()
    assert [line.get("reason") for line in read_trace(path)] == [None, "abort"]
