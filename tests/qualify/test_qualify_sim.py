"""``bench`` and ``proof`` end to end: simulator -> real gateway -> the commands (OpenAI SDK, httpx)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gateway.qualify import qualify_app
from gateway.qualify.haystack import build_haystack
from gateway.qualify.schema import schema_errors
from gateway.qualify.stream import decode_rate
from gateway.qualify.urls import public_url
from gateway.qualify.workloads import check_counting

MODEL = "deepseek-v4-flash-0731"


@pytest.fixture
def target(start_sim, start_gateway, make_key) -> tuple[str, str]:
    """(base URL, key) of a gateway in front of a fast simulator."""
    sim = start_sim(decode_tps=2000)
    gateway = start_gateway(sim.url)
    return gateway.url + "/v1", make_key("q")


def test_bench_writes_medians_and_acceptance_from_telemetry(target: tuple[str, str], tmp_path: Path) -> None:
    base_url, key = target
    out = tmp_path / "bench.json"
    args = ["bench", "--base-url", base_url, "--api-key", key, "--model", MODEL, "--repetitions", "1"]
    args += ["--warmup", "1", "--max-tokens", "700", "--json", str(out)]
    result = CliRunner().invoke(qualify_app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["environment"]["model"] == MODEL
    assert report["environment"]["base_url"] == base_url
    assert key not in out.read_text()
    assert set(report["medians"]) == {"counting", "dataclasses", "prose"}
    runs = report["runs"]
    assert [(r["workload"], r["warmup"]) for r in runs] == [
        (w, warm) for w in ("counting", "dataclasses", "prose") for warm in (True, False)
    ]
    for name, row in report["medians"].items():
        assert row["n"] == 1 and row["errors"] == 0, name
        assert row["ttft_s"] > 0 and row["decode_tokens_per_s"] > 0
        assert 0 <= row["acceptance_rate"] <= 1 and row["mean_acceptance_length"] >= 1
        assert row["acceptance_source"].startswith("gateway telemetry")
        measured = next(r for r in runs if r["workload"] == name and not r["warmup"])
        assert row["decode_tokens_per_s"] == measured["decode_tokens_per_s"]  # median of one run
        assert measured["gateway_ttft_s"] is not None and measured["completion_tokens"] > 1
    counting = next(r for r in runs if r["workload"] == "counting" and not r["warmup"])
    assert counting["exact"] is True  # the simulator counts exactly when asked
    assert "counting" in result.output and "decode tok/s" in result.output


def test_bench_rejects_unknown_workload(target: tuple[str, str]) -> None:
    base_url, key = target
    result = CliRunner().invoke(
        qualify_app, ["bench", "--base-url", base_url, "--api-key", key, "--workloads", "x"]
    )
    assert result.exit_code == 2


def _proof(base_url: str, key: str, out: Path, *extra: str) -> tuple[int, dict[str, str], dict]:
    args = ["proof", "--base-url", base_url, "--api-key", key, "--model", MODEL, "--json", str(out)]
    result = CliRunner().invoke(qualify_app, [*args, "--max-tokens", "200", *extra])
    report = json.loads(out.read_text())
    return result.exit_code, {g["gate"]: g["status"] for g in report["gates"]}, report


def test_proof_passes_what_the_simulator_supports_and_fails_the_rest(
    target: tuple[str, str], tmp_path: Path
) -> None:
    base_url, key = target
    code, status, report = _proof(base_url, key, tmp_path / "proof.json")
    assert status == {
        "model_listed": "PASS",
        "stream_done_usage": "PASS",
        "tool_call": "FAIL",  # the simulator calls a tool only when the prompt says #sim:call
        "tool_result": "PASS",  # its answer to a tool result quotes it
        "json_schema": "FAIL",  # ... ignores response_format: filler text is not JSON
        "reasoning_on": "PASS",
        "reasoning_off": "PASS",
        "retrieval": "FAIL",  # ... cannot read the haystack
        "restart": "NOT-APPLICABLE",
    }
    assert code == 1
    assert report["passed"] is False and set(report["failed"]) == {
        "tool_call",
        "json_schema",
        "retrieval",
    }
    assert all(g["reason"] for g in report["gates"])
    retrieval = next(g for g in report["gates"] if g["gate"] == "retrieval")
    assert retrieval["details"]["prompt_tokens"] > 1000  # the default 2,000-token haystack was sent


def test_proof_restart_gate_runs_the_command(target: tuple[str, str], tmp_path: Path) -> None:
    base_url, key = target
    marker = tmp_path / "restarted"
    cmd = f"{sys.executable} -c \"open(r'{marker}', 'w').close()\""
    _, status, report = _proof(
        base_url, key, tmp_path / "p.json", "--restart-cmd", cmd, "--context-tokens", "100"
    )
    assert marker.exists() and status["restart"] == "PASS"
    _, status, _ = _proof(
        base_url, key, tmp_path / "q.json", "--restart-cmd", "exit 3", "--context-tokens", "100"
    )
    assert status["restart"] == "FAIL"


def test_proof_against_nothing_fails_every_gate_without_crashing(tmp_path: Path) -> None:
    code, status, _ = _proof("http://127.0.0.1:9/v1", "k", tmp_path / "none.json")
    assert code == 1
    assert {s for g, s in status.items() if g != "restart"} == {"FAIL"}


def test_helpers() -> None:
    assert decode_rate(11, 1.0, 2.0) == 10.0
    assert decode_rate(1, 1.0, 2.0) is None and decode_rate(5, 1.0, 1.0) is None
    assert public_url("http://u:secret@h:8080/v1/?api_key=x") == "http://h:8080/v1"
    assert check_counting(", ".join(map(str, range(1, 301))))
    assert not check_counting("1, 2, 4")
    hay = build_haystack(500, seed=1)
    assert hay.prompt.count(hay.key) == 1 and hay == build_haystack(500, seed=1)
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    assert schema_errors({"a": 1}, schema) == []
    assert schema_errors({"a": True, "b": 1}, schema) == [
        "$: unexpected 'b'",
        "$.a: expected integer, got bool",
    ]


def test_bench_without_a_server_exits_1(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        qualify_app, ["bench", "--base-url", "http://127.0.0.1:9/v1", "--timeout", "2"]
    )
    assert result.exit_code == 1 and "cannot list models" in result.output
