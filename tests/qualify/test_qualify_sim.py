"""``bench`` and ``proof`` end to end: simulator -> real gateway -> the commands (OpenAI SDK, httpx)."""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from dspark_qualify import qualify_app
from dspark_qualify.haystack import build_haystack
from dspark_qualify.load import arrival_offsets
from dspark_qualify.schema import schema_errors
from dspark_qualify.serving_metrics import METRICS, PERCENTILES, percentile
from dspark_qualify.stream import decode_rate
from dspark_qualify.urls import public_url
from dspark_qualify.workloads import check_counting

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
    args = ["bench", "--url", base_url, "--api-key", key, "--model", MODEL, "--repetitions", "1"]
    args += ["--warmup", "1", "--max-tokens", "700", "--report", str(out)]
    result = CliRunner().invoke(qualify_app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["environment"]["model"] == MODEL
    assert report["environment"]["base_url"] == base_url
    assert report["environment"]["mode"] == "sequential"
    assert report["environment"]["target"] == {
        "kind": "simulator",
        "simulator": True,
        "owned_by": ["dspark-sim"],
    }
    assert "target: SIMULATOR" in result.output
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
        qualify_app, ["bench", "--url", base_url, "--api-key", key, "--workloads", "x"]
    )
    assert result.exit_code == 2


def _proof(
    base_url: str, key: str, out: Path, *extra: str, model: str | None = MODEL
) -> tuple[int, dict[str, str], dict[str, Any], str]:
    args = ["proof", "--url", base_url, "--api-key", key, "--report", str(out)]
    args += ["--model", model] if model else []
    result = CliRunner().invoke(qualify_app, [*args, "--max-tokens", "200", *extra], env={"COLUMNS": "200"})
    report = json.loads(out.read_text())
    return result.exit_code, {g["gate"]: g["status"] for g in report["gates"]}, report, result.output


SIM_NA = {"tool_call", "json_schema", "retrieval"}


@pytest.mark.parametrize("through_gateway", [True, False], ids=["gateway", "simulator-direct"])
def test_proof_on_the_simulator_says_so_marks_what_it_cannot_pass_and_exits_0(
    request: pytest.FixtureRequest, start_sim, tmp_path: Path, through_gateway: bool
) -> None:
    base_url, key = request.getfixturevalue("target") if through_gateway else (start_sim().url + "/v1", "any")
    code, status, report, output = _proof(base_url, key, tmp_path / "proof.json")
    assert status == {
        "model_listed": "PASS",
        "stream_done_usage": "PASS",
        "tool_call": "NOT-APPLICABLE",  # the simulator calls a tool only when the prompt says #sim:call
        "tool_result": "PASS",  # its answer to a tool result quotes it
        "json_schema": "NOT-APPLICABLE",  # ... ignores response_format: filler text is not JSON
        "reasoning_on": "PASS",
        "reasoning_off": "PASS",
        "retrieval": "NOT-APPLICABLE",  # ... cannot read the haystack
        "restart": "NOT-APPLICABLE",
    }
    assert code == 0, output
    assert report["passed"] is True and report["failed"] == []
    assert report["environment"]["target"]["kind"] == "simulator"
    assert "target: SIMULATOR" in output
    gates = {g["gate"]: g for g in report["gates"]}
    for name in SIM_NA:  # the gate ran, and its own verdict is kept after the marker
        assert gates[name]["reason"].startswith("n/a (simulator): "), gates[name]
    assert "not in the answer" in gates["retrieval"]["reason"]
    assert gates["retrieval"]["details"]["prompt_tokens"] > 1000  # the default 2,000-token haystack was sent
    assert not gates["restart"]["reason"].startswith("n/a (simulator)")


def test_proof_on_the_simulator_still_fails_gates_that_get_no_answer(
    target: tuple[str, str], tmp_path: Path
) -> None:
    """A model the gateway does not serve: every request is refused (404), so no gate is n/a."""
    base_url, key = target
    code, status, report, _ = _proof(base_url, key, tmp_path / "p.json", model="no-such-model")
    assert code == 1 and report["environment"]["target"]["simulator"] is True
    assert {status[g] for g in SIM_NA} == {"FAIL"}
    assert all(not g["reason"].startswith("n/a") for g in report["gates"] if g["gate"] in SIM_NA)


def test_proof_restart_gate_runs_the_command(target: tuple[str, str], tmp_path: Path) -> None:
    base_url, key = target
    marker = tmp_path / "restarted"
    cmd = f"{sys.executable} -c \"open(r'{marker}', 'w').close()\""
    _, status, _, _ = _proof(
        base_url, key, tmp_path / "p.json", "--restart-cmd", cmd, "--context-tokens", "100"
    )
    assert marker.exists() and status["restart"] == "PASS"
    _, status, _, _ = _proof(
        base_url, key, tmp_path / "q.json", "--restart-cmd", "exit 3", "--context-tokens", "100"
    )
    assert status["restart"] == "FAIL"


@pytest.mark.parametrize("model", [MODEL, None], ids=["model", "no-model"])
def test_proof_against_nothing_fails_every_gate_without_crashing(tmp_path: Path, model: str | None) -> None:
    code, status, report, output = _proof("http://127.0.0.1:9/v1", "k", tmp_path / "none.json", model=model)
    assert code == 1
    assert {s for g, s in status.items() if g != "restart"} == {"FAIL"}
    assert report["environment"]["target"]["kind"] == "unknown" and "target: unknown" in output
    # the table is titled by the model asked for or, with none known, by the URL proved
    title = f"proof: {model}" if model else "proof: http://127.0.0.1:9/v1 (model unknown)"
    assert title in output and "proof: None" not in output


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
    # np.percentile's default (linear) interpolation, as vLLM's benchmark reports
    assert [percentile([1.0, 2.0, 3.0, 4.0], p) for p in (50, 90, 99)] == pytest.approx([2.5, 3.7, 3.97])
    assert percentile([7.0], 99) == 7.0
    assert arrival_offsets(3, math.inf) == [0.0, 0.0, 0.0]
    poisson = arrival_offsets(50, 10.0, seed=3)
    assert poisson == arrival_offsets(50, 10.0, seed=3) != arrival_offsets(50, 10.0, seed=4)
    assert poisson == sorted(poisson) and poisson[0] > 0 and poisson[-1] == pytest.approx(50 / 10.0)


def test_bench_with_a_wrong_key_says_what_the_gateway_answered(target: tuple[str, str]) -> None:
    base_url, _ = target
    result = CliRunner().invoke(
        qualify_app, ["bench", "--url", base_url, "--api-key", "dsk-" + "x" * 43], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 1
    assert f"cannot list models at {base_url}/models: HTTP 401: Invalid API key.\n" in result.output
    assert "target: unknown (GET /models failed: HTTP 401: Invalid API key.)" in result.output
    assert "developer.mozilla.org" not in result.output


def test_bench_without_a_server_exits_1(tmp_path: Path) -> None:
    result = CliRunner().invoke(qualify_app, ["bench", "--url", "http://127.0.0.1:9/v1", "--timeout", "2"])
    assert result.exit_code == 1 and "cannot list models" in result.output


VLLM_TOTALS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
)


def _bench_load(
    base_url: str, key: str, tmp_path: Path, *extra: str, model: str = MODEL
) -> tuple[int, dict, str]:
    out = tmp_path / "load.json"
    args = ["bench", "--url", base_url, "--api-key", key, "--model", model, "--report", str(out)]
    result = CliRunner().invoke(qualify_app, [*args, *extra], env={"COLUMNS": "200"})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(out.read_text()), result.output


def _check_serving_report(report: dict[str, Any], num_prompts: int) -> list[dict[str, Any]]:
    """The vLLM-named fields are there and agree with the runs; returns the measured runs."""
    measured = [r for r in report["runs"] if not r["warmup"]]
    assert report["num_prompts"] == num_prompts == len(measured)
    assert sorted(r["index"] for r in measured) == list(range(num_prompts))
    assert report["completed"] == num_prompts and report["failed"] == 0
    assert all(r["error"] is None and r["start_s"] is not None for r in measured)
    assert report["total_output_tokens"] == sum(r["completion_tokens"] for r in measured)
    assert report["total_input_tokens"] == sum(r["prompt_tokens"] for r in measured)
    assert report["request_throughput"] == pytest.approx(num_prompts / report["duration"])
    assert report["output_throughput"] == pytest.approx(report["total_output_tokens"] / report["duration"])
    for name in METRICS:
        mean, median = report[f"mean_{name}_ms"], report[f"median_{name}_ms"]
        p50, p90, p99 = (report[f"p{p}_{name}_ms"] for p in PERCENTILES)
        assert report[f"std_{name}_ms"] >= 0 and mean > 0, name
        assert 0 <= p50 <= p90 <= p99, name
        assert p50 == pytest.approx(median), name
    ttft = [r["ttft_s"] * 1000 for r in measured]
    tpot = [(r["e2e_s"] - r["ttft_s"]) * 1000 / (r["completion_tokens"] - 1) for r in measured]
    assert report["median_ttft_ms"] == pytest.approx(statistics.median(ttft))
    assert report["mean_tpot_ms"] == pytest.approx(statistics.fmean(tpot))
    assert report["median_e2el_ms"] == pytest.approx(statistics.median(r["e2e_s"] * 1000 for r in measured))
    assert report["environment"]["mode"] == "load"
    assert report["environment"]["target"]["simulator"] is True
    return measured


def test_bench_concurrency_mode_reports_vllm_metrics_and_plots(
    target: tuple[str, str], tmp_path: Path
) -> None:
    base_url, key = target
    png = tmp_path / "load.png"
    code, report, output = _bench_load(
        base_url, key, tmp_path, "--concurrency", "3", "--num-prompts", "7", "--max-tokens", "40",
        "--workloads", "counting,prose", "--plot", str(png),
    )  # fmt: skip
    assert code == 0, output
    assert report["max_concurrency"] == 3 and report["request_rate"] == "inf" and report["burstiness"] == 1.0
    measured = _check_serving_report(report, 7)
    assert [r["workload"] for r in sorted(measured, key=lambda r: r["index"])] == [
        "counting",
        "prose",
    ] * 3 + ["counting"]
    warm = [r for r in report["runs"] if r["warmup"]]
    assert [r["workload"] for r in warm] == ["counting", "prose"] and all(r["start_s"] is None for r in warm)
    assert all(r["acceptance_source"].startswith("gateway telemetry") for r in measured)
    assert "Successful requests" in output and "p99" in output and "SIMULATOR" in output
    # the requests' count is of the 7 measured requests; the 2 warm-ups are counted on their own (as
    # lines: the output is not a terminal)
    assert re.search(r"^warm-up: 2/2, ", output, re.MULTILINE), output
    assert re.search(r"^requests: 7/7, ", output, re.MULTILINE), output
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_bench_request_rate_mode_reports_vllm_metrics(target: tuple[str, str], tmp_path: Path) -> None:
    base_url, key = target
    code, report, output = _bench_load(
        base_url, key, tmp_path, "--request-rate", "40", "--num-prompts", "6", "--max-tokens", "24",
        "--warmup", "0", "--workloads", "counting",
    )  # fmt: skip
    assert code == 0, output
    assert report["request_rate"] == 40.0 and report["max_concurrency"] is None
    assert not [r for r in report["runs"] if r["warmup"]]
    _check_serving_report(report, 6)


def test_bench_load_counts_failed_requests(target: tuple[str, str], tmp_path: Path) -> None:
    base_url, key = target
    code, report, _ = _bench_load(
        base_url, key, tmp_path, "--num-prompts", "3", "--warmup", "0", model="no-such-model"
    )
    assert code == 1
    assert report["completed"] == 0 and report["failed"] == 3
    assert all("NotFoundError" in r["error"] for r in report["runs"])
    assert report["p99_ttft_ms"] is None and report["total_output_tokens"] == 0


@pytest.mark.parametrize(
    "args",
    [
        ["--plot", "x.png"],  # a plot needs a load run
        ["--concurrency", "2", "--repetitions", "2"],  # repetitions are the sequential mode's
        ["--request-rate", "0"],
    ],
)
def test_bench_refuses_options_that_do_not_go_together(args: list[str], tmp_path: Path) -> None:
    result = CliRunner().invoke(qualify_app, ["bench", "--url", "http://127.0.0.1:9/v1", *args])
    assert result.exit_code == 2, result.output


def test_bench_takes_the_gateways_own_address_prints_json_on_stdout_and_a_line_per_step(
    target: tuple[str, str],
) -> None:
    """The one --url convention (the gateway's address; /v1 added and said), --json as everywhere
    (the report on stdout, the tables on stderr), and progress lines where stderr is not a terminal."""
    base_url, key = target
    root = base_url.removesuffix("/v1")
    args = ["bench", "--url", root, "--api-key", key, "--model", MODEL, "--repetitions", "2", "--warmup", "0"]
    result = CliRunner().invoke(
        qualify_app, [*args, "--max-tokens", "40", "--workloads", "counting", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # nothing else on stdout
    assert report["environment"]["base_url"] == base_url
    assert f"note: using {base_url}" in result.stderr
    steps = [
        line for line in result.stderr.splitlines() if re.match(r"counting run \d: \d/2, [\d.]+ s$", line)
    ]
    assert len(steps) == 2, result.stderr
