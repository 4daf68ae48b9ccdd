"""Refuse unsafe runtime settings before a launch, each refusal with its reason.

Rules (sources: the DSpark Graph-8 recipe's stabilised profile and its warnings, the deployment report's
fabric notes; rationale in docs/stability.md):

- vLLM binds a loopback address: the gateway is the only door (vLLM's ``--api-key`` leaves routes open).
- Headroom beyond the qualified balanced values (GPU memory utilisation 0.75, 4,096 batched tokens,
  2 sequences) — e.g. the report's 0.80 / 8,192 / 6 — needs ``DSPARK_ALLOW_UNQUALIFIED=1``.
- ``MAX_CUDAGRAPH_CAPTURE_SIZE`` >= K + 1, the DSpark verify shape (6 for K5).
- ``MAX_NUM_SEQS`` >= 1; the UCX registration-cache safeguards are set.
- The tokenizer mode and the reasoning and tool parsers are the model generation's
  (``DSPARK_MODEL_GENERATION``: ``deepseek_v4`` or ``deepseek_v41``).
- Each node sets its own ``NCCL_IB_GID_INDEX`` and ``VLLM_HOST_IP`` (different nodes, different IPs);
  both ranks share ``MASTER_ADDR`` / ``MASTER_PORT``, and ``MASTER_ADDR`` is the head's fabric address.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from dspark_runtime.profile import GENERATIONS, NodeEnv, RuntimeProfile

#: The recipe's qualified (pressure-tested) ceilings.
QUALIFIED_GPU_MEMORY_UTILIZATION = 0.75
QUALIFIED_BATCHED_TOKENS = 4096
QUALIFIED_MAX_NUM_SEQS = 2
THINKING_DEFAULTS = ("low", "high", "max")


@dataclass(frozen=True)
class Problem:
    """One refused setting: ``where`` is ``profile``, ``head`` or ``worker``; ``setting`` the variable."""

    where: str
    setting: str
    reason: str


def is_loopback(host: str) -> bool:
    """``127.0.0.0/8``, ``::1`` or ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check(profile: RuntimeProfile, head_env: NodeEnv, worker_env: NodeEnv) -> list[Problem]:
    """Every problem of ``profile`` run on the two nodes; an empty list means safe to launch."""
    return [*check_profile(profile), *check_nodes(head_env, worker_env)]


def check_profile(profile: RuntimeProfile) -> list[Problem]:
    """Problems of the rank-independent settings."""
    problems: list[Problem] = []

    def refuse(setting: str, reason: str) -> None:
        problems.append(Problem("profile", setting, reason))

    if not is_loopback(profile.vllm_host):
        refuse(
            "VLLM_HOST",
            f"vLLM must bind a loopback address, not {profile.vllm_host}: the gateway is the "
            "only authenticated door (vLLM's --api-key leaves inference routes open)",
        )
    if not 1 <= profile.vllm_port <= 65535:
        refuse("VLLM_PORT", f"must be a TCP port (1-65535), got {profile.vllm_port}")
    if profile.max_num_seqs < 1:
        refuse("MAX_NUM_SEQS", f"must be >= 1, got {profile.max_num_seqs}")
    if not 0 < profile.gpu_memory_utilization < 1:
        refuse("GPU_MEMORY_UTILIZATION", f"must be in (0, 1), got {profile.gpu_memory_utilization:g}")
    if profile.num_speculative_tokens < 1:
        refuse("MTP_NUM_TOKENS", f"DSpark needs >= 1 draft token, got {profile.num_speculative_tokens}")
    if profile.max_cudagraph_capture_size < profile.verify_tokens:
        refuse(
            "MAX_CUDAGRAPH_CAPTURE_SIZE",
            f"{profile.max_cudagraph_capture_size} does not cover the DSpark verify shape of "
            f"{profile.verify_tokens} tokens (K{profile.num_speculative_tokens} + 1): decode would leave "
            f"CUDA graphs; use >= {profile.verify_tokens} (the recipe's Graph-8)",
        )
    if profile.ucx_mem_mmap_hook_mode != "none":
        refuse(
            "UCX_MEM_MMAP_HOOK_MODE",
            f"must be 'none' (stabilised profile's UCX safeguard), got {profile.ucx_mem_mmap_hook_mode!r}",
        )
    if profile.ucx_rcache_max_unreleased is None or profile.ucx_rcache_max_unreleased < 1:
        refuse(
            "UCX_RCACHE_MAX_UNRELEASED",
            "must be set (the stabilised profile uses 1024) so the UCX registration cache releases memory",
        )
    if profile.default_thinking not in THINKING_DEFAULTS:
        refuse(
            "DEFAULT_THINKING",
            f"server default must be one of {', '.join(THINKING_DEFAULTS)}, got "
            f"{profile.default_thinking!r} (turn thinking off per request or per key in the gateway)",
        )
    parser = GENERATIONS[profile.model_generation].parser
    for setting, value in (
        ("TOKENIZER_MODE", profile.tokenizer_mode),
        ("REASONING_PARSER", profile.reasoning_parser),
        ("TOOL_CALL_PARSER", profile.tool_call_parser),
    ):
        if value != parser:
            refuse(
                setting,
                f"{value!r} is not the chat format of DSPARK_MODEL_GENERATION={profile.model_generation} "
                f"({parser!r}): vLLM would encode its prompts or read its reasoning and tool calls wrong",
            )
    problems.extend(_unqualified(profile))
    return problems


def _unqualified(profile: RuntimeProfile) -> list[Problem]:
    if profile.allow_unqualified:
        return []
    hint = "beyond the qualified headroom; set DSPARK_ALLOW_UNQUALIFIED=1 only after a pressure-qualified run"
    problems = []
    if profile.gpu_memory_utilization > QUALIFIED_GPU_MEMORY_UTILIZATION:
        problems.append(
            Problem(
                "profile",
                "GPU_MEMORY_UTILIZATION",
                f"{profile.gpu_memory_utilization:g} > {QUALIFIED_GPU_MEMORY_UTILIZATION}: {hint}",
            )
        )
    if profile.max_num_batched_tokens > QUALIFIED_BATCHED_TOKENS:
        problems.append(
            Problem(
                "profile",
                "MAX_NUM_BATCHED_TOKENS",
                f"{profile.max_num_batched_tokens} > {QUALIFIED_BATCHED_TOKENS}: {hint}",
            )
        )
    if profile.max_num_seqs > QUALIFIED_MAX_NUM_SEQS:
        problems.append(
            Problem("profile", "MAX_NUM_SEQS", f"{profile.max_num_seqs} > {QUALIFIED_MAX_NUM_SEQS}: {hint}")
        )
    return problems


def check_nodes(head: NodeEnv, worker: NodeEnv) -> list[Problem]:
    """Problems of the two node env files, alone and together."""
    problems: list[Problem] = []
    for where, node in (("head", head), ("worker", worker)):
        if node.nccl_ib_gid_index is None:
            problems.append(
                Problem(
                    where,
                    "NCCL_IB_GID_INDEX",
                    "missing: read this node's RoCEv2 GID index "
                    "from sysfs (it can differ between nodes and move after a reboot)",
                )
            )
        if not node.vllm_host_ip:
            problems.append(Problem(where, "VLLM_HOST_IP", "missing: this node's fabric address"))
        if not node.master_addr:
            problems.append(Problem(where, "MASTER_ADDR", "missing: the head node's fabric address"))
    if head.master_addr and worker.master_addr and head.master_addr != worker.master_addr:
        problems.append(
            Problem(
                "worker",
                "MASTER_ADDR",
                f"{worker.master_addr} differs from the head's "
                f"{head.master_addr}: both ranks must use the head's fabric address",
            )
        )
    if head.master_port != worker.master_port:
        problems.append(
            Problem(
                "worker", "MASTER_PORT", f"{worker.master_port} differs from the head's {head.master_port}"
            )
        )
    if head.master_addr and head.vllm_host_ip and head.master_addr != head.vllm_host_ip:
        problems.append(
            Problem(
                "head",
                "MASTER_ADDR",
                f"{head.master_addr} is not the head's own fabric address VLLM_HOST_IP={head.vllm_host_ip}",
            )
        )
    if head.vllm_host_ip and head.vllm_host_ip == worker.vllm_host_ip:
        problems.append(
            Problem(
                "worker",
                "VLLM_HOST_IP",
                f"same as the head's ({head.vllm_host_ip}): each node sets its own address",
            )
        )
    return problems
