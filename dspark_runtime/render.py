"""The exact ``vllm serve`` command and container environment of one rank, rendered from a profile.

The flag set is the deployment report's validated command (``validate-dspark-config.sh`` output) with the
recipe's balanced values, vLLM on ``--host 127.0.0.1`` and ``--port VLLM_PORT`` (the gateway is the only
door), multi-node flags ``--nnodes 2 --node-rank R --master-addr … --master-port …``, and ``--headless``
on rank 1 as the recipe's ``HEADLESS=1`` worker launch does. ``runtime/docker-compose.yml`` builds the
same command from the same variables; ``tests/runtime`` keeps the two in step.
"""

from __future__ import annotations

import json
import shlex

from dspark_runtime.profile import RuntimeProfile

RANKS = (0, 1)

#: Reasoning markers of DeepSeek-V4's chat template (deployment report, ``--reasoning-config``).
REASONING_START = " thinking"
REASONING_END = " response"


def speculative_config(profile: RuntimeProfile) -> str:
    """``--speculative-config`` JSON: DSpark with K draft tokens (compact, key order as the report)."""
    config = {
        "method": "dspark",
        "num_speculative_tokens": profile.num_speculative_tokens,
        "draft_sample_method": profile.draft_sample_method,
    }
    return json.dumps(config, separators=(",", ":"))


def render(profile: RuntimeProfile, rank: int) -> tuple[list[str], dict[str, str]]:
    """``(argv, env)`` of rank ``rank`` (0 = head, serves the API; 1 = headless worker).

    Needs ``profile.node`` (load the profile with a node env file); raises ``ValueError`` otherwise.
    """
    if rank not in RANKS:
        raise ValueError(f"rank must be 0 (head) or 1 (worker), not {rank}")
    node = profile.node
    if node is None or not node.master_addr:
        raise ValueError(
            "rendering needs a node env file with MASTER_ADDR (runtime/.env.head or .env.worker)"
        )
    reasoning = {
        "reasoning_parser": profile.reasoning_parser,
        "reasoning_start_str": REASONING_START,
        "reasoning_end_str": REASONING_END,
    }
    template_kwargs = {"thinking": True, "reasoning_effort": profile.default_thinking}
    argv = [
        "vllm", "serve", profile.model,
        "--served-model-name", profile.served_model_name,
        "--host", profile.vllm_host, "--port", str(profile.vllm_port),
        "--trust-remote-code",
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
        "--kv-cache-dtype", profile.kv_cache_dtype, "--block-size", str(profile.block_size),
        "--max-model-len", str(profile.max_model_len), "--max-num-seqs", str(profile.max_num_seqs),
        "--max-num-batched-tokens", str(profile.max_num_batched_tokens),
        "--max-cudagraph-capture-size", str(profile.max_cudagraph_capture_size),
        "--gpu-memory-utilization", f"{profile.gpu_memory_utilization:g}",
        "--enable-prefix-caching", "--enable-prompt-tokens-details", "--async-scheduling",
        "--enable-chunked-prefill",
        "--kv-events-config", json.dumps(kv_events_config(profile), separators=(",", ":")),
        "--speculative-config", speculative_config(profile),
        "--tokenizer-mode", profile.tokenizer_mode, "--distributed-executor-backend", "mp",
        "--moe-backend", profile.moe_backend,
        "--tool-call-parser", profile.tool_call_parser, "--enable-auto-tool-choice",
        "--reasoning-parser", profile.reasoning_parser,
        "--reasoning-config", json.dumps(reasoning, separators=(",", ":")),
        "--default-chat-template-kwargs", json.dumps(template_kwargs, separators=(",", ":")),
        "--generation-config", "vllm", "--enable-flashinfer-autotune",
        "--nnodes", "2", "--node-rank", str(rank),
        "--master-addr", node.master_addr, "--master-port", str(node.master_port),
    ]  # fmt: skip
    if profile.scheduling_policy:
        argv += ["--scheduling-policy", profile.scheduling_policy]
    if node.otlp_traces_endpoint:
        argv += ["--otlp-traces-endpoint", node.otlp_traces_endpoint]
    if rank == 1:
        argv.append("--headless")
    return argv, render_env(profile)


def kv_events_config(profile: RuntimeProfile) -> dict[str, object]:
    """vLLM's ``--kv-events-config``: events on ZMQ over Unix sockets in ``KV_EVENTS_DIR``, which vLLM
    binds (it binds every ``ipc://`` endpoint: ``vllm/distributed/kv_events.py``,
    ``ZmqEventPublisher``) and the gateway connects to. Not tcp: the events carry every tenant's
    token ids, and any process of the host could read or forge them on a port."""
    events, replay = profile.kv_events_endpoints
    return {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": events, "replay_endpoint": replay}


def render_env(profile: RuntimeProfile) -> dict[str, str]:
    """The container environment: NCCL over RoCE, UCX safeguards, vLLM switches. Unset values are omitted."""
    node = profile.node
    values: dict[str, str | int | None] = {
        "VLLM_HOST_IP": node.vllm_host_ip if node else None,
        "NCCL_IB_DISABLE": "0",
        "NCCL_IB_GID_INDEX": node.nccl_ib_gid_index if node else None,
        "NCCL_IB_HCA": node.nccl_ib_hca if node else None,
        "NCCL_SOCKET_IFNAME": node.nccl_socket_ifname if node else None,
        "GLOO_SOCKET_IFNAME": node.gloo_socket_ifname if node else None,
        "UCX_MEM_MMAP_HOOK_MODE": profile.ucx_mem_mmap_hook_mode,
        "UCX_RCACHE_MAX_UNRELEASED": profile.ucx_rcache_max_unreleased,
        "VLLM_USE_BREAKABLE_CUDAGRAPH": profile.use_breakable_cudagraph,
        "VLLM_USE_FLASHINFER_SAMPLER": profile.use_flashinfer_sampler,
        "HF_HUB_OFFLINE": profile.hf_hub_offline,
        # the gateway's protocol: one collector URL for both (vLLM's default is gRPC)
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    }
    return {key: str(value) for key, value in values.items() if value is not None and value != ""}


def shell_command(argv: list[str]) -> str:
    """``argv`` as one shell-quoted line, one flag per continuation line for reading."""
    parts: list[str] = []
    for arg in argv:
        quoted = shlex.quote(arg)
        if arg.startswith("--") and parts:
            parts.append(" \\\n  " + quoted)
        else:
            parts.append((" " if parts else "") + quoted)
    return "".join(parts)
