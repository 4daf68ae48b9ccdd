"""Settings refused at start rather than failing requests later."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from sqlalchemy.engine import make_url

from gateway.config import Settings

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"slots": 2, "max_n": 3}, "max_n"),  # a request of 3 sequences could never hold 2 slots
        ({"jwt_secret": "short"}, "jwt_secret"),  # RFC 7518 section 3.2: 32 characters for HS256
        ({"metrics_token": "short"}, "metrics_token"),
        # the callback is never built from a request's Host header
        (
            {"oidc_issuer": "https://idp.test", "oidc_client_id": "c", "oidc_admin_values": ("admins",)},
            "oidc_redirect_url",
        ),
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


@pytest.mark.parametrize(
    "given",
    ["localhost:8000", "127.0.0.1:8000", "ftp://h:8000", "http://", "http://:8000", "http://h:port", "/v1"],
)
def test_an_upstream_that_is_no_http_url_is_refused(given: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Taken, ``localhost:8000`` would start a gateway whose every request is a 503."""
    rule = r"upstream\n.*must be an absolute http:// or https:// URL with a host"
    with pytest.raises(ValidationError, match=rule):
        Settings(upstream=given)
    monkeypatch.setenv("GATEWAY_UPSTREAM", given)
    with pytest.raises(ValidationError, match=rule):
        Settings()


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000"),
        ("https://vllm.internal/v1", "https://vllm.internal/v1"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_an_http_upstream_is_kept_without_its_trailing_slash(given: str, kept: str) -> None:
    assert Settings(upstream=given).upstream == kept


def test_the_metrics_token_minimum_is_documented_where_the_setting_is() -> None:
    Settings(metrics_token="t" * 16)
    with pytest.raises(ValidationError, match="metrics_token"):
        Settings(metrics_token="t" * 15)
    for doc in ("README.md", "docs/deploy.md"):
        text = " ".join((REPO / doc).read_text().split())
        assert re.search(r"`GATEWAY_METRICS_TOKEN`[^.]*16 characters or more", text), doc


def test_every_setting_is_in_the_readme_table() -> None:
    """README.md's Configuration table names each ``Settings`` field's variable (``GATEWAY_<FIELD>``)."""
    section = (REPO / "README.md").read_text().split("\n## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    named = {name for row in rows for name in re.findall(r"`(GATEWAY_[A-Z0-9_]+)`", row.split(" | ")[0])}
    prefix = Settings.model_config["env_prefix"]
    assert {f"{prefix}{field}".upper() for field in Settings.model_fields} - named == set()
