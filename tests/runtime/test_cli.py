"""``runtime render`` / ``runtime check`` through typer's CliRunner (the app is not registered yet)."""

from __future__ import annotations

import shlex
from pathlib import Path

from typer.testing import CliRunner

from gateway.runtime import load_profile, render
from gateway.runtime.cli import runtime_app
from tests.runtime.conftest import HEAD_TEMPLATE, WORKER_TEMPLATE

runner = CliRunner()
TEMPLATES = ["--head-env", str(HEAD_TEMPLATE), "--worker-env", str(WORKER_TEMPLATE)]


def test_render_prints_env_and_the_exact_command() -> None:
    result = runner.invoke(
        runtime_app, ["render", "--profile", "balanced", "--rank", "1", "--env-file", str(WORKER_TEMPLATE)]
    )
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("# profile balanced, rank 1")
    command_start = next(i for i, line in enumerate(lines) if line.startswith("vllm serve"))
    env = dict(line.split("=", 1) for line in lines[1:command_start])
    argv = shlex.split("\n".join(lines[command_start:]).replace("\\\n", " "))  # as a shell reads it
    assert (argv, env) == render(load_profile("balanced", WORKER_TEMPLATE), 1)
    assert argv[-1] == "--headless"


def test_render_refuses_a_bad_rank() -> None:
    result = runner.invoke(runtime_app, ["render", "--rank", "2"])
    assert result.exit_code == 2


def test_check_balanced_ok() -> None:
    result = runner.invoke(runtime_app, ["check", "--profile", "balanced", *TEMPLATES])
    assert result.exit_code == 0, result.output
    assert "OK" in result.output


def test_check_throughput_prints_problems_and_exits_1() -> None:
    result = runner.invoke(runtime_app, ["check", "--profile", "throughput", *TEMPLATES])
    assert result.exit_code == 1
    for setting in ("GPU_MEMORY_UTILIZATION", "MAX_NUM_BATCHED_TOKENS", "MAX_NUM_SEQS"):
        assert setting in result.output


def test_check_sees_the_worker_file_override(tmp_path: Path) -> None:
    worker = tmp_path / ".env.worker"
    worker.write_text(WORKER_TEMPLATE.read_text().replace("NCCL_IB_GID_INDEX=3", "NCCL_IB_GID_INDEX="))
    result = runner.invoke(
        runtime_app, ["check", "--head-env", str(HEAD_TEMPLATE), "--worker-env", str(worker)]
    )
    assert result.exit_code == 1
    assert "NCCL_IB_GID_INDEX" in result.output and "worker" in result.output


def test_check_unreadable_env_file_exits_2(tmp_path: Path) -> None:
    result = runner.invoke(
        runtime_app, ["check", "--head-env", str(tmp_path / "nope"), "--worker-env", str(WORKER_TEMPLATE)]
    )
    assert result.exit_code == 2
