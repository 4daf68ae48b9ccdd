"""Paths of the runtime files under test, and a parser for ``vllm serve`` argv."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dspark_runtime import NodeEnv, RuntimeProfile, load_node_env, load_profile

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime"
HEAD_TEMPLATE = RUNTIME / ".env.head.example"
WORKER_TEMPLATE = RUNTIME / ".env.worker.example"
TEMPLATES = (HEAD_TEMPLATE, WORKER_TEMPLATE)
#: ``runtime check``'s arguments naming the two templates
TEMPLATE_ARGS = ["--head-env", str(HEAD_TEMPLATE), "--worker-env", str(WORKER_TEMPLATE)]
BIN = str(Path(sys.executable).parent / "dspark-gateway")


def runtime(*args: str) -> subprocess.CompletedProcess[str]:
    """``dspark-gateway runtime *args`` as a process."""
    return subprocess.run([BIN, "runtime", *args], capture_output=True, text=True, timeout=60)


def argv_dict(argv: list[str]) -> dict[str, str | bool]:
    """``vllm serve M --flag value --switch`` -> ``{"model": M, "--flag": "value", "--switch": True}``.

    A flag repeated would silently lose a value, so that is an error.
    """
    assert argv[:2] == ["vllm", "serve"], argv[:2]
    parsed: dict[str, str | bool] = {"model": argv[2]}
    rest = argv[3:]
    i = 0
    while i < len(rest):
        flag = rest[i]
        assert flag.startswith("--"), f"expected a flag at {i}: {flag!r}"
        assert flag not in parsed, f"{flag} given twice"
        if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            parsed[flag] = rest[i + 1]
            i += 2
        else:
            parsed[flag] = True
            i += 1
    return parsed


@pytest.fixture
def balanced_head() -> RuntimeProfile:
    return load_profile("balanced", HEAD_TEMPLATE)


@pytest.fixture
def head_env() -> NodeEnv:
    return load_node_env(HEAD_TEMPLATE)


@pytest.fixture
def worker_env() -> NodeEnv:
    return load_node_env(WORKER_TEMPLATE)
