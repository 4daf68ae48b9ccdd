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
#: CI clones the repository with the team's shared/ directory beside it.
COMPOSE_SCHEMA = REPO.parent / "shared" / "schemas" / "compose-spec.json"


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="session")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


@pytest.fixture(scope="session")
def compose_schema() -> dict[str, Any]:
    if not COMPOSE_SCHEMA.is_file():
        pytest.fail(
            f"Compose schema not found at {COMPOSE_SCHEMA}: clone the team's shared/ directory beside "
            "the repository (shared/schemas/compose-spec.json)",
            pytrace=False,
        )
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
