"""The rendered ``vllm serve`` command against the seeds, flag by flag."""

from __future__ import annotations

import json
import shlex

import pytest

from dspark_common.zmq_endpoints import check_endpoint
from dspark_runtime import RuntimeProfile, gateway_defaults, load_profile, render
from dspark_runtime.profile import profile_path
from tests.runtime.conftest import HEAD_TEMPLATE, WORKER_TEMPLATE, argv_dict

# The DSpark Graph-8 recipe, "Canonical runtime profile" (flags) ...
RECIPE_FLAGS = {
    "--tensor-parallel-size": "2",
    "--kv-cache-dtype": "nvfp4_ds_mla",
    "--moe-backend": "flashinfer_b12x",
    "--max-cudagraph-capture-size": "8",
    "--max-model-len": "1048576",
    "--max-num-seqs": "2",
    "--max-num-batched-tokens": "4096",
    "--gpu-memory-utilization": "0.75",
    "--block-size": "256",
}
# ... and its environment.
RECIPE_ENV = {
    "VLLM_USE_BREAKABLE_CUDAGRAPH": "0",
    "UCX_MEM_MMAP_HOOK_MODE": "none",
    "UCX_RCACHE_MAX_UNRELEASED": "1024",
}

# The deployment report's rendered command (validate-dspark-config.sh), verbatim.
REPORT_COMMAND = """vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 \
  --served-model-name deepseek-v4-flash-0731 \
  --host 0.0.0.0 --port 8888 --trust-remote-code \
  --tensor-parallel-size 2 --pipeline-parallel-size 1 \
  --kv-cache-dtype nvfp4_ds_mla --block-size 256 \
  --max-model-len 1048576 --max-num-seqs 6 \
  --max-num-batched-tokens 8192 --max-cudagraph-capture-size 36 \
  --gpu-memory-utilization 0.80 --enable-prefix-caching \
  --enable-prompt-tokens-details --async-scheduling \
  --enable-chunked-prefill \
  --speculative-config '{"method":"dspark","num_speculative_tokens":5,"draft_sample_method":"probabilistic"}' \
  --tokenizer-mode deepseek_v4 --distributed-executor-backend mp \
  --moe-backend flashinfer_b12x \
  --tool-call-parser deepseek_v4 --enable-auto-tool-choice \
  --reasoning-parser deepseek_v4 \
  --reasoning-config '{"reasoning_parser":"deepseek_v4","reasoning_start_str":" thinking","reasoning_end_str":" response"}' \
  --default-chat-template-kwargs '{"thinking":true,"reasoning_effort":"low"}' \
  --generation-config vllm --enable-flashinfer-autotune \
  --nnodes 2 --node-rank 0 --master-addr 192.168.100.11 --master-port 25000"""  # noqa: E501

# Where balanced deliberately differs from the report: loopback API, the recipe's headroom.
BALANCED_VS_REPORT = {
    "--host": ("0.0.0.0", "127.0.0.1"),
    "--port": ("8888", "8000"),
    "--max-num-seqs": ("6", "2"),
    "--max-num-batched-tokens": ("8192", "4096"),
    "--max-cudagraph-capture-size": ("36", "8"),
    "--gpu-memory-utilization": ("0.80", "0.75"),
}


def test_balanced_matches_the_recipe_canonical_profile(balanced_head: RuntimeProfile) -> None:
    argv, env = render(balanced_head, 0)
    flags = argv_dict(argv)
    assert {flag: flags[flag] for flag in RECIPE_FLAGS} == RECIPE_FLAGS
    assert json.loads(str(flags["--speculative-config"])) == {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "draft_sample_method": "probabilistic",
    }
    assert {key: env[key] for key in RECIPE_ENV} == RECIPE_ENV
    assert flags["model"] == "deepseek-ai/DeepSeek-V4-Flash-0731"


#: What the profiles add to the report's command: vLLM's KV cache events, for the gateway, on Unix
#: sockets in a directory only the two reach (never a port: any process of the host could read every
#: tenant's token ids there, or publish forged blocks).
ADDED = {
    "--kv-events-config": {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "ipc:///run/dspark-kv/events",
        "replay_endpoint": "ipc:///run/dspark-kv/replay",
    }
}


def test_balanced_differs_from_the_report_only_where_intended(balanced_head: RuntimeProfile) -> None:
    report = argv_dict(shlex.split(REPORT_COMMAND))
    ours = argv_dict(render(balanced_head, 0)[0])
    added = {flag: json.loads(str(ours.pop(flag))) for flag in set(ours) - set(report)}
    assert added == ADDED
    assert set(ours) == set(report)
    differences = {flag: (report[flag], ours[flag]) for flag in ours if ours[flag] != report[flag]}
    assert differences == BALANCED_VS_REPORT


def test_throughput_renders_the_report_command_on_loopback() -> None:
    ours = argv_dict(render(load_profile("throughput", HEAD_TEMPLATE), 0)[0])
    report = argv_dict(shlex.split(REPORT_COMMAND))
    assert json.loads(str(ours.pop("--kv-events-config"))) == ADDED["--kv-events-config"]
    differences = {flag for flag in ours if ours[flag] != report[flag]}
    assert differences == {"--host", "--port", "--gpu-memory-utilization"}
    assert float(str(ours["--gpu-memory-utilization"])) == 0.80


def test_the_kv_events_directory_is_an_absolute_path_a_socket_address_holds(tmp_path) -> None:
    """It goes unquoted into vLLM's ``bash -c`` line, and ``<dir>/replay`` must fit ``sun_path``; the
    endpoints it makes are those the gateway accepts."""
    for value in ("run/dspark-kv", "/run/dspark kv", "/run/$(id)", "/" + "d" * 100):
        profile = tmp_path / "custom.env"
        profile.write_text(f"KV_EVENTS_DIR={value}\n")
        with pytest.raises(ValueError, match="KV_EVENTS_DIR"):
            load_profile(profile)
    profile.write_text("KV_EVENTS_DIR=/" + "d" * 99 + "\n")
    endpoints = load_profile(profile).kv_events_endpoints
    assert [check_endpoint(endpoint) for endpoint in endpoints] == list(endpoints)


def test_ranks() -> None:
    head = argv_dict(render(load_profile("balanced", HEAD_TEMPLATE), 0)[0])
    worker_argv, worker_env = render(load_profile("balanced", WORKER_TEMPLATE), 1)
    worker = argv_dict(worker_argv)
    assert (head["--node-rank"], worker["--node-rank"]) == ("0", "1")
    assert "--headless" not in head and worker["--headless"] is True
    assert head["--nnodes"] == worker["--nnodes"] == "2"
    assert head["--master-addr"] == worker["--master-addr"] == "192.168.100.11"
    assert head["--master-port"] == worker["--master-port"] == "25000"
    assert worker_env["VLLM_HOST_IP"] == "192.168.100.10"
    assert worker_env["NCCL_IB_GID_INDEX"] == "3"


def test_render_needs_a_node_and_a_valid_rank(balanced_head: RuntimeProfile) -> None:
    with pytest.raises(ValueError, match="MASTER_ADDR"):
        render(load_profile("balanced"), 0)
    with pytest.raises(ValueError, match="rank"):
        render(balanced_head, 2)


def test_gateway_defaults() -> None:
    assert gateway_defaults(load_profile("balanced")) == {
        "slots": 2,
        "served_model": "deepseek-v4-flash-0731",
        "kv_budget_tokens": 1_372_579,
        "max_model_len": 1_048_576,
        "long_prompt_tokens": 32_768,
        "express_slots": 1,
        "upstream_priority": False,
        "kv_events": "ipc:///run/dspark-kv/events",
        "kv_events_replay": "ipc:///run/dspark-kv/replay",
        "kv_events_bind": False,
        "kv_block_size": 256,
    }
    throughput = load_profile("throughput", HEAD_TEMPLATE)  # its empty KV_CAPACITY_TOKENS wins
    defaults = gateway_defaults(throughput)
    assert (defaults["slots"], defaults["kv_budget_tokens"]) == (6, None)


def test_the_priority_scheduling_option(tmp_path) -> None:
    """SCHEDULING_POLICY=priority: vLLM gets --scheduling-policy priority, the gateway sends batch
    requests' priority; empty (both profiles' default): neither."""
    profile = tmp_path / "priority.env"
    profile.write_text(
        profile_path("balanced").read_text().replace("SCHEDULING_POLICY=\n", "SCHEDULING_POLICY=priority\n")
    )
    flags = argv_dict(render(load_profile(profile, HEAD_TEMPLATE), 0)[0])
    assert flags["--scheduling-policy"] == "priority"
    assert gateway_defaults(load_profile(profile))["upstream_priority"] is True
    assert "--scheduling-policy" not in argv_dict(render(load_profile("balanced", HEAD_TEMPLATE), 0)[0])
