"""Runtime profiles of the TP=2 vLLM backend: env files parsed into one typed model (pure, no I/O but reads).

A launch layers two env files exactly as ``docker compose --env-file NODE --env-file PROFILE`` does: the
node file (``runtime/.env.head`` / ``runtime/.env.worker``, from the ``*.example`` templates) first, the
profile (``dspark_runtime/profiles/<name>.env``) last, so the profile's tuning wins and the node file supplies
the fabric settings. :func:`load_profile` reproduces that merge; it never reads ``os.environ`` (only
``gateway.config`` does).

Sources: the DSpark Graph-8 recipe's "Canonical runtime profile" (balanced values, UCX safeguards,
``MASTER_ADDR`` = head fabric address on both ranks, per-node GID index) and the DGX Spark deployment
report's ``.env.dspark`` (variable names such as ``MTP_NUM_TOKENS``, ``MOE_BACKEND``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

M = TypeVar("M", bound=BaseModel)

#: ``runtime/`` of the repository (present in a source checkout / editable install).
RUNTIME_DIR = Path(__file__).resolve().parents[1] / "runtime"
#: The profiles, shipped with the package (``dspark_runtime/profiles/<name>.env``).
PROFILES_DIR = Path(__file__).resolve().parent / "profiles"


@dataclass(frozen=True, slots=True)
class Generation:
    """What a DeepSeek model generation is served with: its checkpoint, the name clients ask for, and
    the vLLM tokenizer mode and reasoning and tool parsers of its chat format (one name for the three)."""

    model: str
    served_model_name: str
    parser: str


#: ``DSPARK_MODEL_GENERATION`` -> its defaults. V4-Flash-0731 is the seeds' deployment; V4.1's
#: format (vLLM ``vllm/tokenizers/deepseek_v41.py``, ``vllm/parser/deepseek_v41.py``) keeps
#: ``<think>``/``</think>`` and spaces its DSML tool-call markup (``<｜DSML｜ calls>``).
GENERATIONS: Mapping[str, Generation] = {
    "deepseek_v4": Generation("deepseek-ai/DeepSeek-V4-Flash-0731", "deepseek-v4-flash-0731", "deepseek_v4"),
    "deepseek_v41": Generation("deepseek-ai/DeepSeek-V4.1-Flash", "deepseek-v4.1-flash", "deepseek_v41"),
}
#: The variables a generation sets unless the env files do.
_GENERATION_VARIABLES = (
    ("DSPARK_MODEL", "model"),
    ("SERVED_MODEL_NAME", "served_model_name"),
    ("TOKENIZER_MODE", "parser"),
    ("REASONING_PARSER", "parser"),
    ("TOOL_CALL_PARSER", "parser"),
)


class ProfileError(ValueError):
    """An env file is missing, malformed, or has a value of the wrong type."""


class NodeEnv(BaseModel):
    """What differs per node: fabric addresses and interfaces (``runtime/.env.{head,worker}``)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    vllm_host_ip: str | None = Field(None, alias="VLLM_HOST_IP")
    master_addr: str | None = Field(None, alias="MASTER_ADDR")
    master_port: int = Field(25000, alias="MASTER_PORT")
    nccl_ib_gid_index: int | None = Field(None, alias="NCCL_IB_GID_INDEX")
    nccl_ib_hca: str | None = Field(None, alias="NCCL_IB_HCA")
    nccl_socket_ifname: str | None = Field(None, alias="NCCL_SOCKET_IFNAME")
    gloo_socket_ifname: str | None = Field(None, alias="GLOO_SOCKET_IFNAME")
    hf_cache_dir: str = Field("~/.cache/huggingface", alias="HF_CACHE_DIR")
    #: An OTLP/HTTP traces URL (``http://collector:4318/v1/traces``): vLLM exports its request spans
    #: there (``--otlp-traces-endpoint``), under the gateway's (docs/telemetry.md); empty: no traces.
    #: A URL only: the compose file puts it into vLLM's ``bash -c`` command line unquoted.
    otlp_traces_endpoint: str | None = Field(
        None, alias="OTLP_TRACES_ENDPOINT", pattern=r"^$|^https?://[A-Za-z0-9._~:/?#\[\]@!%+=,-]+$"
    )


class RuntimeProfile(BaseModel):
    """One rank's effective settings: the profile's tuning plus (optionally) its node's ``NodeEnv``.

    Range checks that make a profile *unsafe* (not merely mistyped) live in ``dspark_runtime.check``,
    so that a bad value is reported with a reason instead of failing the load.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    name: str = "custom"
    image: str = Field("ghcr.io/anemll/dspark-vllm-gx10:0.1.1", alias="DSPARK_VLLM_IMAGE")
    #: The model generation (:data:`GENERATIONS`): the defaults of the model, its served name, the
    #: tokenizer mode and the parsers.
    model_generation: Literal["deepseek_v4", "deepseek_v41"] = Field(
        "deepseek_v4", alias="DSPARK_MODEL_GENERATION"
    )
    model: str = Field("deepseek-ai/DeepSeek-V4-Flash-0731", alias="DSPARK_MODEL")
    served_model_name: str = Field("deepseek-v4-flash-0731", alias="SERVED_MODEL_NAME")
    vllm_host: str = Field("127.0.0.1", alias="VLLM_HOST")
    vllm_port: int = Field(8000, alias="VLLM_PORT")
    max_model_len: int = Field(1_048_576, alias="MAX_MODEL_LEN")
    max_num_seqs: int = Field(2, alias="MAX_NUM_SEQS")
    max_num_batched_tokens: int = Field(4096, alias="MAX_NUM_BATCHED_TOKENS")
    gpu_memory_utilization: float = Field(0.75, alias="GPU_MEMORY_UTILIZATION")
    max_cudagraph_capture_size: int = Field(8, alias="MAX_CUDAGRAPH_CAPTURE_SIZE")
    num_speculative_tokens: int = Field(5, alias="MTP_NUM_TOKENS")
    draft_sample_method: str = Field("probabilistic", alias="DRAFT_SAMPLE_METHOD")
    default_thinking: str = Field("low", alias="DEFAULT_THINKING")
    kv_cache_dtype: str = Field("nvfp4_ds_mla", alias="KV_CACHE_DTYPE")
    block_size: int = Field(256, alias="BLOCK_SIZE")
    #: The directory of vLLM's KV cache event sockets (``events`` and ``replay``, ``ipc://``: vLLM
    #: binds both, the gateway connects): only vLLM's and the gateway's users may reach it
    #: (the gateway refuses it otherwise: ``dspark_common/zmq_endpoints.py``). An absolute path only:
    #: the compose file puts it into vLLM's ``bash -c`` command line unquoted; 100 bytes at most, so
    #: that a socket's path fits a Unix socket address (107).
    kv_events_dir: str = Field("/run/dspark-kv", alias="KV_EVENTS_DIR", pattern=r"^/[A-Za-z0-9._/-]{0,99}$")
    moe_backend: str = Field("flashinfer_b12x", alias="MOE_BACKEND")
    tokenizer_mode: str = Field("deepseek_v4", alias="TOKENIZER_MODE")
    reasoning_parser: str = Field("deepseek_v4", alias="REASONING_PARSER")
    tool_call_parser: str = Field("deepseek_v4", alias="TOOL_CALL_PARSER")
    use_flashinfer_sampler: str = Field("1", alias="VLLM_USE_FLASHINFER_SAMPLER")
    use_breakable_cudagraph: str = Field("0", alias="VLLM_USE_BREAKABLE_CUDAGRAPH")
    hf_hub_offline: str = Field("1", alias="HF_HUB_OFFLINE")
    ucx_mem_mmap_hook_mode: str | None = Field(None, alias="UCX_MEM_MMAP_HOOK_MODE")
    ucx_rcache_max_unreleased: int | None = Field(None, alias="UCX_RCACHE_MAX_UNRELEASED")
    kv_capacity_tokens: int | None = Field(None, alias="KV_CAPACITY_TOKENS")
    #: vLLM's ``--scheduling-policy``: empty for its default (``fcfs``), or ``priority`` (waiting
    #: sequences by the request's ``priority``, lower first; the gateway then sends batch requests as 1).
    scheduling_policy: Literal["", "priority"] = Field("", alias="SCHEDULING_POLICY")
    allow_unqualified: bool = Field(False, alias="DSPARK_ALLOW_UNQUALIFIED")
    node: NodeEnv | None = None

    @model_validator(mode="before")
    @classmethod
    def _generation_defaults(cls, data: Any) -> Any:
        """The model generation's model, served name, tokenizer mode and parsers, for each of them the
        env files do not set."""
        if not isinstance(data, Mapping):
            return data
        generation = GENERATIONS.get(str(data.get("DSPARK_MODEL_GENERATION") or "deepseek_v4"))
        if generation is None:
            return data  # the field's own validation names the choices
        filled = dict(data)
        for alias, attr in _GENERATION_VARIABLES:
            if not filled.get(alias):  # unset, or blank (``TOKENIZER_MODE=``)
                filled[alias] = getattr(generation, attr)
        return filled

    @property
    def kv_events_endpoints(self) -> tuple[str, str]:
        """vLLM's KV cache event endpoints ``(events, replay)``: Unix sockets in ``KV_EVENTS_DIR``."""
        directory = self.kv_events_dir.rstrip("/")
        return f"ipc://{directory}/events", f"ipc://{directory}/replay"

    @property
    def verify_tokens(self) -> int:
        """Tokens one sequence verifies per DSpark step: the K drafts plus the target's own token."""
        return self.num_speculative_tokens + 1


def parse_env_text(text: str, source: str = "<text>") -> dict[str, str]:
    """Parse dotenv text as Compose reads ``--env-file``: ``KEY=VALUE``, ``#`` comments, optional quotes.

    An unquoted value ends at `` #`` (inline comment); blank values are kept as ``""``.
    """
    values: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        line = line.removeprefix("export ").strip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not key.replace("_", "").isalnum() or key[0].isdigit():
            raise ProfileError(f"{source}:{number}: expected KEY=VALUE, got {raw!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        else:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


def read_env_file(path: str | Path) -> dict[str, str]:
    """Read and parse one env file; a missing file is a :class:`ProfileError`."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"cannot read env file {file}: {exc.strerror or exc}") from exc
    return parse_env_text(text, str(file))


def profile_path(profile: str | Path) -> Path:
    """``balanced`` -> ``dspark_runtime/profiles/balanced.env``; anything with a suffix or a slash is a
    path."""
    text = str(profile)
    if "/" in text or text.endswith(".env"):
        return Path(text)
    return PROFILES_DIR / f"{text}.env"


def node_env_from(values: Mapping[str, str]) -> NodeEnv:
    """The node fields of merged env values (empty strings count as unset)."""
    return _build(NodeEnv, values, "node env")


def load_node_env(path: str | Path) -> NodeEnv:
    """Load ``runtime/.env.head`` or ``runtime/.env.worker`` (or a template) as a :class:`NodeEnv`."""
    return _build(NodeEnv, read_env_file(path), str(path))


def profile_from(values: Mapping[str, str], name: str = "custom", with_node: bool = False) -> RuntimeProfile:
    """Build a :class:`RuntimeProfile` from already merged env values."""
    profile = _build(RuntimeProfile, values, name)
    node = node_env_from(values) if with_node else None
    return profile.model_copy(update={"name": name, "node": node})


def load_profile(profile: str | Path, env_file: str | Path | None = None) -> RuntimeProfile:
    """Load a profile (a name under ``dspark_runtime/profiles/`` or a path), layered over ``env_file``
    if given.

    Merge order is Compose's ``--env-file env_file --env-file profile``: later files win.
    """
    path = profile_path(profile)
    merged = read_env_file(env_file) if env_file is not None else {}
    merged.update(read_env_file(path))
    return profile_from(merged, name=path.stem, with_node=env_file is not None)


def _build(model: type[M], values: Mapping[str, str], source: str) -> M:
    known = {field.alias for field in model.model_fields.values() if field.alias}
    data = {key: value for key, value in values.items() if key in known and value != ""}
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ProfileError(f"{source}: {problems}") from exc
