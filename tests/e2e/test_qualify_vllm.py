"""``bench`` and ``proof`` through the gateway in front of a REAL vLLM (CPU, scripted tiny model).

The tiny model answers "Let me think</think>Hello world" to everything and has a 512-token context:
bench must still measure it, and proof must report honestly what it cannot do (never crash, never pass
retrieval). Requests stay small (``--max-tokens 50``, ``--context-tokens 200``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dspark_qualify import qualify_app
from tests.support.vllm_server import TINY_MODEL_NAME, VLLMServer


@pytest.fixture
def target(vllm_server: VLLMServer, start_gateway, make_key) -> tuple[str, str]:
    gateway = start_gateway(vllm_server.base_url, served_model=TINY_MODEL_NAME)
    return gateway.url + "/v1", make_key("q")


def _invoke(*args: str) -> int:
    result = CliRunner().invoke(qualify_app, list(args), env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code


def test_bench_one_repetition_measures_decode(target: tuple[str, str], tmp_path: Path) -> None:
    base_url, key = target
    out = tmp_path / "bench.json"
    code = _invoke(
        "bench", "--url", base_url, "--api-key", key, "--model", TINY_MODEL_NAME, "--repetitions", "1",
        "--warmup", "1", "--max-tokens", "50", "--temperature", "0", "--report", str(out),
    )  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text())
    for name, row in report["medians"].items():
        assert row["n"] == 1, name
        assert row["decode_tokens_per_s"] > 0 and row["ttft_s"] > 0
    runs = [r for r in report["runs"] if not r["warmup"]]
    assert all(r["completion_tokens"] == 12 and r["finish_reason"] == "stop" for r in runs)
    assert all(
        r["acceptance_source"] is None or r["acceptance_source"].startswith("gateway telemetry") for r in runs
    )


def test_proof_reports_honestly_and_never_crashes(target: tuple[str, str], tmp_path: Path) -> None:
    base_url, key = target
    out = tmp_path / "proof.json"
    code = _invoke(
        "proof", "--url", base_url, "--api-key", key, "--model", TINY_MODEL_NAME,
        "--context-tokens", "200", "--max-tokens", "50", "--report", str(out),
    )  # fmt: skip
    report = json.loads(out.read_text())
    status = {g["gate"]: g["status"] for g in report["gates"]}
    assert status == {
        "model_listed": "PASS",
        "stream_done_usage": "PASS",
        # vLLM without --enable-auto-tool-choice answers 400 to tools (tool_choice defaults to auto)
        "tool_call": "NOT-APPLICABLE",
        "tool_result": "NOT-APPLICABLE",
        # guided decoding starts the object, but the scripted chain fills the string until max_tokens
        "json_schema": "FAIL",
        "reasoning_on": "PASS",
        "reasoning_off": "FAIL",  # the scripted model always thinks: "Let me think</think>"
        "retrieval": "FAIL",  # it always says "Hello world"
        "restart": "NOT-APPLICABLE",
    }
    assert code == 1 and report["passed"] is False
    assert all(g["reason"] for g in report["gates"])
