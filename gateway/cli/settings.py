"""Helpers shared by the CLI commands: settings from flags, and user-facing failure."""

from __future__ import annotations

from typing import Any

import typer
from rich.console import Console

from gateway.config import Settings


def settings(**overrides: Any) -> Settings:
    """Settings from the environment, with the flags that were given (not None) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def fail(message: str) -> typer.Exit:
    """Print ``error: message`` to stderr; raise the returned exit (status 1)."""
    Console(stderr=True).print(f"[red]error:[/red] {message}")
    return typer.Exit(code=1)
