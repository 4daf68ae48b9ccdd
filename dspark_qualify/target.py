"""What is being qualified: a real server or the built-in simulator, told from ``GET /models``.

The simulator labels every model card ``owned_by: "dspark-sim"`` (:data:`dspark_sim.SIMULATOR_OWNED_BY`;
vLLM writes ``"vllm"``), and the gateway passes the upstream's cards on, so the marker is seen both
directly and through the gateway. A listing that fails leaves the kind ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import httpx2

from dspark_qualify.urls import api_url
from dspark_sim import SIMULATOR_OWNED_BY

__all__ = ["Target", "probe_target"]


@dataclass(frozen=True, slots=True)
class Target:
    """Model ids and ``owned_by`` values ``GET /models`` answered, or the error it gave."""

    models: tuple[str, ...] = ()
    owned_by: tuple[str, ...] = ()
    error: str | None = None

    @property
    def simulator(self) -> bool:
        return SIMULATOR_OWNED_BY in self.owned_by

    @property
    def kind(self) -> Literal["simulator", "server", "unknown"]:
        if self.error is not None:
            return "unknown"
        return "simulator" if self.simulator else "server"

    def describe(self) -> str:
        """One line for a report header, e.g. ``simulator (GET /models: owned_by dspark-sim)``."""
        if self.error is not None:
            return f"unknown (GET /models failed: {self.error})"
        owners = ", ".join(self.owned_by) or "no owned_by"
        label = "SIMULATOR, not a real model" if self.simulator else "server"
        return f"{label} (GET /models: owned_by {owners})"

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "simulator": self.simulator, "owned_by": list(self.owned_by)}


def refusal(response: httpx2.Response) -> str:
    """A non-2xx answer on one line, ``HTTP 401: Invalid API key.``: its status and the message of
    its body in OpenAI's error shape (``{"error": {"message": …}}``, the gateway's and vLLM's), else
    its reason phrase."""
    try:
        body = response.json()
    except ValueError:  # not JSON (a proxy's HTML page)
        body = None
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    lines = str(message).strip().splitlines() if message else []
    return f"HTTP {response.status_code}: {lines[0][:200] if lines else response.reason_phrase}"


def probe_target(http: httpx2.Client, base_url: str, api_key: str) -> Target:
    """``GET /models`` once; never raises (a failure is a :class:`Target` with ``error``)."""
    try:
        response = http.get(api_url(base_url, "/models"), headers={"Authorization": f"Bearer {api_key}"})
        if not response.is_success:
            return Target(error=refusal(response))
        cards = [c for c in response.json().get("data", []) if isinstance(c, dict)]
    except (httpx2.HTTPError, ValueError, AttributeError) as exc:
        return Target(error=f"{type(exc).__name__}: {str(exc)[:200]}")
    owners = dict.fromkeys(str(c["owned_by"]) for c in cards if c.get("owned_by"))
    return Target(tuple(str(c.get("id", "")) for c in cards), tuple(owners))
