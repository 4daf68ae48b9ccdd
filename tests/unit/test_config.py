"""Settings refused at start rather than failing requests later."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from gateway.config import Settings


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"slots": 2, "max_n": 3}, "max_n"),  # a request of 3 sequences could never hold 2 slots
        ({"jwt_secret": "short"}, "jwt_secret"),  # RFC 7518 section 3.2: 32 characters for HS256
        ({"metrics_token": "short"}, "metrics_token"),
    ],
)
def test_unusable_settings_are_refused(fields: dict[str, object], named: str) -> None:
    with pytest.raises(ValidationError, match=named):
        Settings(upstream="http://127.0.0.1:8000", **fields)


@pytest.mark.parametrize(
    ("given", "opened"),
    [
        ("gw.db", "sqlite+aiosqlite:///{cwd}/gw.db"),
        ("./data/gw.db", "sqlite+aiosqlite:///{cwd}/data/gw.db"),
        ("/var/lib/dspark/gw.db", "sqlite+aiosqlite:////var/lib/dspark/gw.db"),
        ("~/gw.db", "sqlite+aiosqlite:///{home}/gw.db"),
        ("sqlite:///relative.db", "sqlite+aiosqlite:///relative.db"),
        ("sqlite:////abs/gw.db", "sqlite+aiosqlite:////abs/gw.db"),
        ("sqlite+aiosqlite:////abs/gw.db", "sqlite+aiosqlite:////abs/gw.db"),
        (
            "postgresql://gw:p%40ss@db:5432/gw?ssl=require",
            "postgresql+asyncpg://gw:p%40ss@db:5432/gw?ssl=require",
        ),
        ("postgres://db/gw", "postgresql+asyncpg://db/gw"),
        ("postgresql+asyncpg://db/gw", "postgresql+asyncpg://db/gw"),
    ],
)
def test_database_url_takes_a_path_a_plain_url_or_an_async_one(
    given: str, opened: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    expected = opened.format(cwd=tmp_path, home=tmp_path / "home")
    assert Settings(database_url=given).database_url == expected
    monkeypatch.setenv("GATEWAY_DATABASE_URL", given)  # the environment takes the same forms
    assert Settings().database_url == expected
    assert make_url(expected).get_dialect().is_async


@pytest.mark.parametrize("given", ["", "  ", "postgresql://db:port/gw"])
def test_a_database_url_that_is_neither_is_refused(given: str) -> None:
    with pytest.raises(ValidationError, match="database_url"):
        Settings(database_url=given)
