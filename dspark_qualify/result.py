"""Gate outcomes and the context every gate runs in.

A gate is PASS, FAIL or NOT-APPLICABLE, always with a reason. NOT-APPLICABLE is reserved for "the
server says it does not offer this" (an HTTP 400/422/501 on a request using the feature, e.g. vLLM
without ``--enable-auto-tool-choice`` refusing ``tool_choice: auto``) or "not asked for" (no
``--restart-cmd``) or "the target is the simulator, which cannot do this" (reason ``n/a (simulator):
…``, see :data:`dspark_qualify.proof.SIMULATOR_CANNOT`); a feature that is accepted but does not work
is a FAIL.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import httpx2
import openai
from openai import OpenAI

from dspark_qualify.target import Target

__all__ = ["GateResult", "ProofContext", "Status", "unsupported"]


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_APPLICABLE = "NOT-APPLICABLE"


@dataclass(slots=True)
class GateResult:
    gate: str
    status: Status
    reason: str
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(slots=True)
class ProofContext:
    """Connections and parameters shared by the gates; ``model`` is filled in by the model gate if unset."""

    client: OpenAI
    http: httpx2.Client
    base_url: str
    api_key: str
    model: str | None
    max_tokens: int = 512
    context_tokens: int = 2000
    seed: int | None = None
    restart_cmd: str | None = None
    restart_timeout_s: float = 900.0
    target: Target | None = None

    @property
    def simulator(self) -> bool:
        return self.target is not None and self.target.simulator

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


def unsupported(exc: BaseException, gate: str) -> GateResult | None:
    """A NOT-APPLICABLE result when ``exc`` is the server refusing the feature, else ``None``."""
    if isinstance(exc, openai.APIStatusError) and exc.status_code in (400, 422, 501):
        return GateResult(
            gate,
            Status.NOT_APPLICABLE,
            f"server refused the feature (HTTP {exc.status_code}): {str(exc.message)[:300]}",
        )
    return None
