"""The CLI as a user runs it: `dspark-gateway` processes from the venv, on the test's own database
(the one `start_gateway` and `make_key` use), and what a failure must look like."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

BIN = str(Path(sys.executable).parent / "dspark-gateway")
MODEL = "deepseek-v4-flash-0731"
Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def env(tmp_path: Path, database_url: str) -> dict[str, str]:
    """A CLI process's environment: none of the caller's ``GATEWAY_*`` / ``DSPARK_*``, no terminal size
    (``COLUMNS``, ``LINES``: a pytest-xdist worker sets 80; a test that wants a width says so), the
    test's database, and a data folder under the test's (the default database's home)."""
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GATEWAY_", "DSPARK_")) and k not in ("COLUMNS", "LINES")
    }
    return {**environ, "GATEWAY_DATABASE_URL": database_url, "XDG_DATA_HOME": str(tmp_path / "data")}


@pytest.fixture
def cli(env: dict[str, str], tmp_path: Path) -> Cli:
    """``cli(*args, ok=True, cwd=tmp_path, **env overrides)``: one `dspark-gateway` run; with ``ok``
    it must succeed. An override of None removes that variable."""

    def run(
        *args: str, ok: bool = True, cwd: Path | None = None, **extra: str | None
    ) -> subprocess.CompletedProcess[str]:
        environ = {k: v for k, v in {**env, **extra}.items() if v is not None}
        result = subprocess.run(
            [BIN, *args], env=environ, cwd=cwd or tmp_path, capture_output=True, text=True, timeout=60
        )
        if ok:
            assert result.returncode == 0, result.stderr
        return result

    return run


def error_of(result: subprocess.CompletedProcess[str], status: int = 1) -> str:
    """The one error line of a failed run, checked: exit ``status``, no traceback, and on stderr only
    that line (``error: …``) and the database the command used (``database: …``)."""
    assert result.returncode == status, (result.returncode, result.stderr)
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert all(line in errors or line.startswith("database: ") for line in lines), result.stderr
    assert "Traceback" not in result.stderr
    return errors[0]


def last_line(result: subprocess.CompletedProcess[str]) -> str:
    """What a command printed last (a new key's secret)."""
    return result.stdout.strip().splitlines()[-1]
