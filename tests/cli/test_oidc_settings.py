"""Signing in with an identity provider needs its callback URL configured: `serve` refuses to start
without it, in one line, rather than build the URL from each request's ``Host`` header."""

from __future__ import annotations

from tests.cli.conftest import Cli, error_of


def test_serve_without_the_oidc_redirect_url_refuses_to_start(cli: Cli) -> None:
    result = cli(
        "serve",
        "--port",
        "1",  # never bound: the settings are refused first
        ok=False,
        GATEWAY_OIDC_ISSUER="https://idp.test",
        GATEWAY_OIDC_CLIENT_ID="console",
        GATEWAY_OIDC_ADMIN_VALUES="gateway-admins",
    )
    line = error_of(result)
    assert "oidc_redirect_url" in line and "GATEWAY_OIDC_REDIRECT_URL" in line, line
