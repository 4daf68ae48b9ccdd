"""What the console seals into the browser opens only as sealed: same purpose, same secret, in time."""

from __future__ import annotations

from pathlib import Path

from gateway.config import Settings
from gateway.console.sealing import SECRET_NAME, Sealer, console_secret
from gateway.storage.db import open_engine
from gateway.storage.secrets import shared_secret

SECRET = b"k" * 32


def test_a_sealed_value_opens_only_for_its_purpose_secret_and_age() -> None:
    sealer = Sealer(SECRET, "oidc-pending")
    sealed = sealer.seal({"state": "s"})
    assert "state" not in sealed  # encrypted, not merely signed
    assert sealer.open(sealed, 60) == {"state": "s"}
    assert Sealer(SECRET, "login-csrf").open(sealed, 60) is None  # another use's key
    assert Sealer(b"j" * 32, "oidc-pending").open(sealed, 60) is None  # another gateway's
    assert sealer.open(sealed, -1) is None  # older than allowed
    altered = sealed[:-5] + ("A" if sealed[-5] != "A" else "B") + sealed[-4:]
    for refused in (altered, "", None, "not-fernet", "é" * 40):
        assert sealer.open(refused, 60) is None


async def test_the_console_secret_is_the_configured_one_else_the_databases(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'console.db'}"
    engine = await open_engine(url)
    try:
        configured = Settings(upstream="http://127.0.0.1:8000", database_url=url, console_secret="c" * 32)
        assert await console_secret(configured, engine) == b"c" * 32
        unset = Settings(upstream="http://127.0.0.1:8000", database_url=url)
        generated = await console_secret(unset, engine)
        assert generated == await shared_secret(engine, SECRET_NAME) and len(generated) == 32
    finally:
        await engine.dispose()
