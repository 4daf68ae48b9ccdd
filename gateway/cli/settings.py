"""Helpers shared by the CLI commands: settings from flags, the database they use, user-facing failure."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from sqlalchemy.engine import make_url

from gateway.cli.failures import CliError
from gateway.config import Settings


def settings(**overrides: Any) -> Settings:
    """Settings from the environment, with the flags that were given (not None) on top."""
    return Settings(**{k: v for k, v in overrides.items() if v is not None})


def shown_url(url: str) -> str:
    """``url`` as it may be shown: its password, if any, as ``***`` (SQLAlchemy's ``hide_password``)."""
    return make_url(url).render_as_string(hide_password=True)


def announce_database(url: str) -> None:
    """Say on stderr, in one line, which database this command uses (stdout stays the command's)."""
    Console(stderr=True, soft_wrap=True, highlight=False).print(f"database: {shown_url(url)}", markup=False)


def fail(message: str, status: int = 1) -> CliError:
    """The failure to raise for ``message``: written as ``error: message`` on stderr by the entry
    point (:func:`gateway.cli.failures.run`), exit ``status``."""
    return CliError(message, status)
