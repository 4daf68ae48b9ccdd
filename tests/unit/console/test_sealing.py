"""What the console seals into the browser opens only as sealed: same purpose, same secret, in time."""

from __future__ import annotations

from gateway.config import Settings
from gateway.console.sealing import Sealer

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


def test_without_a_configured_secret_each_sealer_has_its_own() -> None:
    settings = Settings(upstream="http://127.0.0.1:8000")
    one, two = (Sealer.for_console(settings, "login-csrf") for _ in range(2))
    assert two.open(one.seal({"login": "x"}), 60) is None
    shared = Settings(upstream="http://127.0.0.1:8000", console_secret="c" * 32)
    one, two = (Sealer.for_console(shared, "login-csrf") for _ in range(2))
    assert two.open(one.seal({"login": "x"}), 60) == {"login": "x"}
