"""The checker: the balanced profile passes, each unsafe setting is refused with its reason."""

from __future__ import annotations

from typing import Any

import pytest

from dspark_runtime import NodeEnv, RuntimeProfile, check, load_profile, render
from dspark_runtime.profile import profile_path
from tests.runtime.conftest import HEAD_TEMPLATE


def refused(problems: list[Any]) -> set[tuple[str, str]]:
    return {(p.where, p.setting) for p in problems}


def test_balanced_profile_passes(
    balanced_head: RuntimeProfile, head_env: NodeEnv, worker_env: NodeEnv
) -> None:
    assert check(balanced_head, head_env, worker_env) == []


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.100.11", "::", "example.org"])
def test_api_host_must_be_loopback(
    balanced_head: RuntimeProfile, head_env: NodeEnv, worker_env: NodeEnv, host: str
) -> None:
    problems = check(balanced_head.model_copy(update={"vllm_host": host}), head_env, worker_env)
    assert refused(problems) == {("profile", "VLLM_HOST")}
    assert "loopback" in problems[0].reason


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
def test_loopback_hosts_pass(
    balanced_head: RuntimeProfile, head_env: NodeEnv, worker_env: NodeEnv, host: str
) -> None:
    assert check(balanced_head.model_copy(update={"vllm_host": host}), head_env, worker_env) == []


@pytest.mark.parametrize(
    ("field", "value", "setting"),
    [
        ("gpu_memory_utilization", 0.80, "GPU_MEMORY_UTILIZATION"),
        ("max_num_batched_tokens", 8192, "MAX_NUM_BATCHED_TOKENS"),
        ("max_num_seqs", 6, "MAX_NUM_SEQS"),
    ],
)
def test_unqualified_headroom_needs_the_override(
    balanced_head: RuntimeProfile,
    head_env: NodeEnv,
    worker_env: NodeEnv,
    field: str,
    value: Any,
    setting: str,
) -> None:
    profile = balanced_head.model_copy(update={field: value})
    problems = check(profile, head_env, worker_env)
    assert refused(problems) == {("profile", setting)}
    assert "DSPARK_ALLOW_UNQUALIFIED=1" in problems[0].reason
    allowed = profile.model_copy(update={"allow_unqualified": True})
    assert check(allowed, head_env, worker_env) == []


def test_throughput_profile_refused_without_and_passes_with_override(
    head_env: NodeEnv, worker_env: NodeEnv, tmp_path: Any
) -> None:
    throughput = load_profile("throughput", HEAD_TEMPLATE)
    assert refused(check(throughput, head_env, worker_env)) == {
        ("profile", "GPU_MEMORY_UTILIZATION"),
        ("profile", "MAX_NUM_BATCHED_TOKENS"),
        ("profile", "MAX_NUM_SEQS"),
    }
    head_file = tmp_path / ".env.head"
    head_file.write_text(
        HEAD_TEMPLATE.read_text().replace("DSPARK_ALLOW_UNQUALIFIED=0", "DSPARK_ALLOW_UNQUALIFIED=1")
    )
    assert check(load_profile("throughput", head_file), head_env, worker_env) == []


def test_missing_gid_index(balanced_head: RuntimeProfile, head_env: NodeEnv, worker_env: NodeEnv) -> None:
    worker = worker_env.model_copy(update={"nccl_ib_gid_index": None})
    problems = check(balanced_head, head_env, worker)
    assert refused(problems) == {("worker", "NCCL_IB_GID_INDEX")}
    assert "sysfs" in problems[0].reason


def test_ranks_with_different_master_addr(
    balanced_head: RuntimeProfile, head_env: NodeEnv, worker_env: NodeEnv
) -> None:
    worker = worker_env.model_copy(update={"master_addr": "192.168.100.10"})
    assert refused(check(balanced_head, head_env, worker)) == {("worker", "MASTER_ADDR")}


def test_master_addr_must_be_the_head(
    balanced_head: RuntimeProfile, head_env: NodeEnv, worker_env: NodeEnv
) -> None:
    head = head_env.model_copy(update={"master_addr": "192.168.1.191"})
    worker = worker_env.model_copy(update={"master_addr": "192.168.1.191"})
    assert refused(check(balanced_head, head, worker)) == {("head", "MASTER_ADDR")}


def test_other_node_problems(balanced_head: RuntimeProfile, head_env: NodeEnv, worker_env: NodeEnv) -> None:
    worker = worker_env.model_copy(update={"master_port": 25001, "vllm_host_ip": head_env.vllm_host_ip})
    assert refused(check(balanced_head, head_env, worker)) == {
        ("worker", "MASTER_PORT"),
        ("worker", "VLLM_HOST_IP"),
    }
    bare = NodeEnv()
    assert refused(check(balanced_head, bare, bare)) == {
        (where, setting)
        for where in ("head", "worker")
        for setting in ("NCCL_IB_GID_INDEX", "VLLM_HOST_IP", "MASTER_ADDR")
    }


@pytest.mark.parametrize(
    ("k", "capture", "ok"), [(5, 4, False), (5, 5, False), (5, 6, True), (5, 8, True), (7, 6, False)]
)
def test_graph_capture_covers_the_verify_shape(
    balanced_head: RuntimeProfile, head_env: NodeEnv, worker_env: NodeEnv, k: int, capture: int, ok: bool
) -> None:
    profile = balanced_head.model_copy(
        update={"num_speculative_tokens": k, "max_cudagraph_capture_size": capture}
    )
    problems = check(profile, head_env, worker_env)
    if ok:
        assert problems == []
    else:
        assert refused(problems) == {("profile", "MAX_CUDAGRAPH_CAPTURE_SIZE")}
        assert f"{k + 1} tokens" in problems[0].reason


@pytest.mark.parametrize(
    ("update", "setting"),
    [
        ({"max_num_seqs": 0}, "MAX_NUM_SEQS"),
        ({"max_num_seqs": -1}, "MAX_NUM_SEQS"),
        ({"gpu_memory_utilization": 0.0}, "GPU_MEMORY_UTILIZATION"),
        ({"num_speculative_tokens": 0}, "MTP_NUM_TOKENS"),
        ({"ucx_mem_mmap_hook_mode": None}, "UCX_MEM_MMAP_HOOK_MODE"),
        ({"ucx_rcache_max_unreleased": None}, "UCX_RCACHE_MAX_UNRELEASED"),
        ({"default_thinking": "off"}, "DEFAULT_THINKING"),
        ({"vllm_port": 70000}, "VLLM_PORT"),
    ],
)
def test_other_profile_refusals(
    balanced_head: RuntimeProfile,
    head_env: NodeEnv,
    worker_env: NodeEnv,
    update: dict[str, Any],
    setting: str,
) -> None:
    problems = check(balanced_head.model_copy(update=update), head_env, worker_env)
    assert refused(problems) == {("profile", setting)}
    assert all(p.reason for p in problems)


def test_the_model_generation_sets_the_model_and_its_chat_format(
    tmp_path, head_env: NodeEnv, worker_env: NodeEnv
) -> None:
    """``DSPARK_MODEL_GENERATION=deepseek_v41`` serves V4.1 with vLLM's ``deepseek_v41`` tokenizer mode
    and parsers, for every one of them the files leave out (V4-Flash-0731 stays the default); a parser
    of the other generation is refused."""
    derived = (
        "DSPARK_MODEL=",
        "SERVED_MODEL_NAME=",
        "TOKENIZER_MODE=",
        "REASONING_PARSER=",
        "TOOL_CALL_PARSER=",
    )
    lines = profile_path("balanced").read_text().replace("GENERATION=deepseek_v4", "GENERATION=deepseek_v41")
    profile = tmp_path / "v41.env"
    profile.write_text("\n".join(line for line in lines.splitlines() if not line.startswith(derived)))
    upgraded = load_profile(profile)
    assert (upgraded.model, upgraded.served_model_name) == (
        "deepseek-ai/DeepSeek-V4.1-Flash",
        "deepseek-v4.1-flash",
    )
    assert {upgraded.tokenizer_mode, upgraded.reasoning_parser, upgraded.tool_call_parser} == {"deepseek_v41"}
    argv = render(upgraded.model_copy(update={"node": head_env}), 0)[0]
    assert (
        argv[argv.index("--reasoning-parser") + 1] == "deepseek_v41"
        and "deepseek-ai/DeepSeek-V4.1-Flash" in argv
    )
    assert check(upgraded, head_env, worker_env) == []
    default = load_profile("balanced", HEAD_TEMPLATE)
    assert (default.model_generation, default.reasoning_parser) == ("deepseek_v4", "deepseek_v4")
    half_done = upgraded.model_copy(update={"tool_call_parser": "deepseek_v4"})
    problems = check(half_done, head_env, worker_env)
    assert refused(problems) == {("profile", "TOOL_CALL_PARSER")} and "deepseek_v41" in problems[0].reason
