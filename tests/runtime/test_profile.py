"""Env files parsed as Compose does, and layered node file < profile."""

from __future__ import annotations

from pathlib import Path

import pytest

from dspark_runtime import ProfileError, load_node_env, load_profile
from dspark_runtime.profile import parse_env_text, profile_path
from tests.runtime.conftest import HEAD_TEMPLATE


def test_parse_env_text() -> None:
    text = "# comment\n\nA=1\nexport B = two \nC='x #y'\nD=\"q\"\nE=v # inline\nF=\n"
    assert parse_env_text(text) == {"A": "1", "B": "two", "C": "x #y", "D": "q", "E": "v", "F": ""}


@pytest.mark.parametrize("line", ["no equals sign", "=value", "1A=x", "A-B=x"])
def test_parse_env_text_refuses_malformed_lines(line: str) -> None:
    with pytest.raises(ProfileError, match=":1:"):
        parse_env_text(line)


def test_profile_wins_over_node_file(tmp_path: Path) -> None:
    node = tmp_path / "node.env"
    node.write_text("MAX_NUM_SEQS=9\nMASTER_ADDR=10.0.0.1\nNCCL_IB_GID_INDEX=1\nVLLM_PORT=9000\n")
    profile = load_profile("balanced", node)
    assert profile.name == "balanced"
    assert profile.max_num_seqs == 2  # the profile's value
    assert profile.vllm_port == 8000  # the profile sets it too
    assert profile.node is not None and profile.node.master_addr == "10.0.0.1"
    assert profile.node.nccl_ib_gid_index == 1


def test_balanced_profile_values() -> None:
    profile = load_profile("balanced", HEAD_TEMPLATE)
    assert (profile.max_num_seqs, profile.gpu_memory_utilization, profile.max_num_batched_tokens) == (
        2,
        0.75,
        4096,
    )
    assert (profile.max_cudagraph_capture_size, profile.num_speculative_tokens, profile.verify_tokens) == (
        8,
        5,
        6,
    )
    assert (profile.ucx_mem_mmap_hook_mode, profile.ucx_rcache_max_unreleased) == ("none", 1024)
    assert profile.kv_capacity_tokens == 1_372_579 and not profile.allow_unqualified


def test_bad_values_and_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.env"
    bad.write_text("MAX_NUM_SEQS=two\n")
    with pytest.raises(ProfileError, match="MAX_NUM_SEQS"):
        load_profile(bad)
    with pytest.raises(ProfileError, match="cannot read"):
        load_profile("no-such-profile")
    with pytest.raises(ProfileError, match="cannot read"):
        load_node_env(tmp_path / "missing")


def test_profile_path() -> None:
    assert profile_path("balanced").name == "balanced.env"
    assert profile_path("x/y.env") == Path("x/y.env")
