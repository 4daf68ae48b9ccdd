"""``dspark-gateway runtime render`` / ``runtime check`` as an operator runs them (real processes), and
where both look for the node env files."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from dspark_runtime import ProfileError, load_profile, render
from dspark_runtime.cli import default_env_file, node_env_files
from dspark_runtime.profile import RUNTIME_DIR
from tests.runtime.conftest import HEAD_TEMPLATE, TEMPLATE_ARGS, WORKER_TEMPLATE, runtime


def test_render_prints_env_and_the_exact_command() -> None:
    result = runtime("render", "--profile", "balanced", "--rank", "1", "--env-file", str(WORKER_TEMPLATE))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# profile balanced, rank 1")
    command_start = next(i for i, line in enumerate(lines) if line.startswith("vllm serve"))
    env = dict(line.split("=", 1) for line in lines[1:command_start])
    argv = shlex.split("\n".join(lines[command_start:]).replace("\\\n", " "))  # as a shell reads it
    assert (argv, env) == render(load_profile("balanced", WORKER_TEMPLATE), 1)
    assert argv[-1] == "--headless"


def test_render_without_the_node_file_says_it_shows_the_templates_addresses() -> None:
    head = RUNTIME_DIR / ".env.head"
    if head.exists():
        pytest.skip("this checkout has its own runtime/.env.head")
    result = runtime("render")
    assert result.returncode == 0, result.stderr
    assert result.stderr == (
        f"note: no {head}: this is the command with {head}.example's addresses; copy it to {head} "
        "and set this node's\n"
    )
    assert result.stdout.startswith(f"# profile balanced, rank 0, node env {head}.example\n")


def test_render_refuses_a_bad_rank() -> None:
    result = runtime("render", "--rank", "2")
    assert result.returncode == 2 and result.stderr.startswith("error: Invalid value for '--rank'")


def test_check_balanced_ok() -> None:
    result = runtime("check", "--profile", "balanced", *TEMPLATE_ARGS)
    assert result.returncode == 0, result.stderr
    assert "OK" in result.stdout


def test_check_throughput_prints_problems_and_exits_1() -> None:
    result = runtime("check", "--profile", "throughput", *TEMPLATE_ARGS)
    assert result.returncode == 1
    for setting in ("GPU_MEMORY_UTILIZATION", "MAX_NUM_BATCHED_TOKENS", "MAX_NUM_SEQS"):
        assert setting in result.stdout


def test_check_sees_the_worker_file_override(tmp_path: Path) -> None:
    worker = tmp_path / ".env.worker"
    worker.write_text(WORKER_TEMPLATE.read_text().replace("NCCL_IB_GID_INDEX=3", "NCCL_IB_GID_INDEX="))
    result = runtime("check", "--head-env", str(HEAD_TEMPLATE), "--worker-env", str(worker))
    assert result.returncode == 1
    assert "NCCL_IB_GID_INDEX" in result.stdout and "worker" in result.stdout


def test_check_unreadable_env_file_exits_2_in_one_line(tmp_path: Path) -> None:
    result = runtime("check", "--head-env", str(tmp_path / "nope"), "--worker-env", str(WORKER_TEMPLATE))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: cannot read env file {tmp_path / 'nope'}: No such file or directory"
    ]


def test_check_finds_the_node_files_where_render_does_or_names_the_templates(tmp_path: Path) -> None:
    examples = {name: (RUNTIME_DIR / f"{name}.example").read_text() for name in (".env.head", ".env.worker")}
    for name, text in examples.items():
        (tmp_path / f"{name}.example").write_text(text)
    with pytest.raises(ProfileError) as missing:
        node_env_files(None, None, tmp_path)
    assert str(missing.value).splitlines() == [str(missing.value)]  # one line
    for name in examples:  # it names each template to copy, and where to
        assert f"{tmp_path / name}.example to {tmp_path / name}" in str(missing.value)
    assert default_env_file(0, tmp_path) == tmp_path / ".env.head.example"  # render shows the template's

    (tmp_path / ".env.head").write_text(examples[".env.head"])
    with pytest.raises(ProfileError, match=r"no \S+/\.env\.worker: copy \S+/\.env\.worker\.example to"):
        node_env_files(None, None, tmp_path)
    given = tmp_path / "elsewhere.env"
    assert node_env_files(None, given, tmp_path) == (tmp_path / ".env.head", given)
    (tmp_path / ".env.worker").write_text(examples[".env.worker"])
    assert node_env_files(None, None, tmp_path) == (tmp_path / ".env.head", tmp_path / ".env.worker")
    assert default_env_file(0, tmp_path) == tmp_path / ".env.head"  # both find the node's own file


def test_check_without_env_files_says_what_to_copy() -> None:
    """The command itself, in a checkout without runtime/.env.head and .env.worker (CI's)."""
    head, worker = RUNTIME_DIR / ".env.head", RUNTIME_DIR / ".env.worker"
    if head.exists() or worker.exists():
        pytest.skip("this checkout has its own node env files (an operator's node)")
    result = runtime("check")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"error: no {head} or {worker}: copy {head}.example to {head} and {worker}.example to {worker}, "
        "then set each node's VLLM_HOST_IP, NCCL_IB_GID_INDEX and MASTER_ADDR (or give --head-env and "
        "--worker-env)"
    ]
