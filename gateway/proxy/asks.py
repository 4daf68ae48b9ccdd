"""What a client may ask of its request's handling, beyond the body: the headers
``x-session-affinity``, ``x-max-wait-s`` and ``x-priority``, checked (400 ``invalid_value``) and
resolved against its key's own settings; and what a batch request carries to vLLM.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gateway.auth.principal import Principal
from gateway.errors import GatewayError

#: vLLM's routes whose request takes ``priority`` (its Anthropic route builds a chat request without
#: it: a Messages request keeps the gateway's class order only).
PRIORITY_ROUTES = frozenset({"/v1/chat/completions", "/v1/completions", "/v1/responses"})
#: vLLM's ``priority`` of a batch request (lower is handled earlier; 0, the default, is interactive's).
BATCH_PRIORITY = 1


def with_priority(body: bytes, priority: int) -> bytes:
    """``body`` (a JSON object, as a dialect serialised it) with ``"priority"`` first: vLLM orders
    its waiting sequences by it under ``--scheduling-policy priority`` (and refuses any priority but
    0 without it). Spliced, not re-serialised: a 1M-token prompt is not encoded twice. A client's own
    ``priority`` (a key with the ``backend_fields`` scope) comes later in the object and wins."""
    assert body.startswith(b"{"), "a dialect's upstream body is a JSON object"
    rest = body[1:].lstrip()
    return b'{"priority":%d' % priority + (b"}" if rest.startswith(b"}") else b"," + rest)


@dataclass(frozen=True, slots=True)
class Asked:
    """What the client asked for in headers, as sent (checked by :func:`resolved`):
    ``x-session-affinity``, ``x-max-wait-s`` (seconds), ``x-priority`` (``interactive`` | ``batch``)."""

    session: str | None = None
    max_wait_s: str | None = None
    priority: str | None = None


def request_class(header: str) -> str:
    """The ``x-priority`` header's class (400 ``invalid_value`` unless interactive or batch)."""
    value = header.strip().lower()
    if value not in ("interactive", "batch"):
        raise GatewayError(
            "invalid_value",
            f"x-priority must be interactive or batch, not {header[:32]!r}.",
            param="x-priority",
        )
    return value


def max_wait(header: str) -> float:
    """The ``x-max-wait-s`` header's seconds (400 ``invalid_value`` unless a number > 0)."""
    try:
        seconds = float(header)
    except ValueError:
        seconds = math.nan
    if not 0 < seconds < math.inf:
        raise GatewayError(
            "invalid_value", f"x-max-wait-s must be a number of seconds > 0, not {header[:32]!r}.",
            param="x-max-wait-s",
        )  # fmt: skip
    return seconds


def too_long(expected_s: float, max_wait_s: float) -> None:
    """429 ``wait_too_long`` when the expected queue wait passes the request's limit, with a
    ``Retry-After`` of how much sooner the queue's pace lets it in."""
    if expected_s > max_wait_s:
        raise GatewayError(
            "wait_too_long",
            f"This request would wait about {expected_s:.0f} s for the model server; it accepts "
            f"{max_wait_s:g} s (x-max-wait-s, or the API key's max_wait_s).",
            headers={"retry-after": str(max(1, math.ceil(expected_s - max_wait_s)))},
        )


def resolved(asked: Asked, principal: Principal) -> tuple[float | None, bool]:
    """The longest queue wait a request accepts (s; None: any) and whether it is batch work: its
    headers', else its key's. A batch key's requests stay batch; a request may lower its key's wait
    or raise it."""
    max_wait_s = max_wait(asked.max_wait_s) if asked.max_wait_s is not None else principal.max_wait_s
    batch = principal.request_class == "batch"
    if asked.priority is not None:
        batch = request_class(asked.priority) == "batch" or batch
    return max_wait_s, batch
