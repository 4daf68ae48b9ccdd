"""A running gateway's admin API (``--url``), for the CLI: each failure one line saying what
happened — unreachable, refused (401/403: not an admin key), or what the gateway answered."""

from __future__ import annotations

from typing import Any

import httpx2
import typer

from dspark_common.gateway_url import GatewayUrl
from gateway.cli.failures import CliError, describe
from gateway.cli.options import ADMIN_KEY_ENV

#: How long one admin call may take, s (reads flush the ledger first).
TIMEOUT_S = 30.0


class AdminClient:
    """Calls under ``<url>/admin`` with the admin key as a bearer token."""

    def __init__(self, url: str, admin_key: str | None) -> None:
        if not admin_key:
            raise CliError(f"--url needs an admin key: --admin-key or {ADMIN_KEY_ENV}")
        try:
            address = GatewayUrl.parse(url)
        except ValueError as exc:
            raise CliError(str(exc)) from None
        if note := address.root_note():
            typer.echo(note, err=True)
        self.url = address.root
        self._headers = {"Authorization": f"Bearer {admin_key}"}

    def call(
        self, method: str, path: str, body: dict[str, Any] | None = None, params: dict[str, Any] | None = None
    ) -> Any:
        """The JSON answer of ``method /admin<path>``; :class:`CliError` for anything but a 2xx JSON one."""
        try:
            with httpx2.Client(
                base_url=self.url + "/admin", headers=self._headers, timeout=TIMEOUT_S
            ) as client:
                response = client.request(method, path, json=body, params=params)
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            raise CliError(f"cannot reach the gateway at {self.url}: {describe(exc)}") from exc
        status = response.status_code
        try:
            answer = response.json()
        except ValueError:
            raise CliError(f"{self.url} answered {status} without JSON: is it a dspark-gateway?") from None
        if status < 400:
            return answer
        error = answer.get("error") if isinstance(answer, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        hint = (
            f" (is --admin-key / {ADMIN_KEY_ENV} an admin key of this gateway?)"
            if status in (401, 403)
            else ""
        )
        raise CliError(f"the gateway answered {status}: {message or response.reason_phrase}{hint}")
