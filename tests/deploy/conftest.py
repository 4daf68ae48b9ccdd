"""Paths and parsed files of deploy/, shared by the deployment tests (static: no Docker needed)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
ENV_EXAMPLE = DEPLOY / ".env.example"
#: The Compose Specification's schema, kept in the repo (tests/data/README.md says where it is from).
COMPOSE_SCHEMA = REPO / "tests" / "data" / "compose-spec.json"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


@pytest.fixture(scope="session")
def compose_schema() -> dict[str, Any]:
    return json.loads(COMPOSE_SCHEMA.read_text())


def env_example() -> dict[str, str]:
    """``NAME=value`` lines of deploy/.env.example (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f".env.example: not NAME=value: {line!r}"
            values[name.strip()] = value.strip()
    return values
