"""RequestTelemetry: what one request cost and how fast it went — one record, read once by every sink.

Formulas (all times in seconds, from the gateway's monotonic clock):

- ``queue_wait_s`` = admission − joining the queue (after the request was read, sized and its tokens
  reserved), split by what it waited for in ``waited_for``
  (``{"slot": s, "kv": s, "lane": s, ...}``, :class:`~gateway.admission.Reason`);
- ``upstream_ttft_s`` = first non-empty reasoning/content/tool-call delta − admission (the role chunk
  does not count); ``ttft_s`` = the same event − arrival (non-stream, from the backend's metrics:
  admission − arrival + ``upstream_ttft_s``);
- ``decode_tokens_per_s`` = (completion_tokens − 1) / (t_last − t_first), tokens from upstream usage,
  never from counting chunks (a speculative chunk carries several tokens);
- ``e2e_s`` = end of the response − arrival.

Non-stream responses have no token timing of their own: when the backend sends per-request metrics
(vLLM ``time_to_first_token_ms``, ``generation_time_ms`` = first to last token), those are used.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gateway.telemetry.spec import SpecStats

#: Exactly the fields of the client-facing ``telemetry`` object (header ``x-gateway-telemetry: 1``).
CLIENT_FIELDS = (
    "request_id",
    "queue_wait_s",
    "ttft_s",
    "upstream_ttft_s",
    "decode_tokens_per_s",
    "e2e_s",
    "prompt_tokens",
    "completion_tokens",
    "cached_tokens",
    "cached_tokens_predicted",
)


def _round(value: float | None) -> float | None:
    return round(value, 6) if value is not None else None


@dataclass(slots=True)
class RequestTelemetry:
    """One request's record. Token counts in tokens, times in seconds, rates in tokens/s."""

    request_id: str
    key_id: str
    key_name: str
    model: str
    route: str
    api: str
    stream: bool
    arrived_at: datetime
    status: int = 0
    queue_wait_s: float | None = None
    waited_for: dict[str, float] = field(default_factory=dict)
    #: Admission's view of the request: the prompt's tokens and where the figure came from
    #: (``tokenize``: the backend's count; ``estimate``: from the body's bytes), the KV tokens
    #: reserved (prompt + output budget, per sequence), and its lane (``long`` or ``short`` prompt).
    prompt_size_tokens: int = 0
    prompt_size_source: str | None = None
    kv_tokens: int = 0
    lane: str | None = None
    #: The prompt tokens admission expected the backend's prefix cache to hold, and from what it knew
    #: (``events``: its KV events; ``estimate``: what the gateway sent it); None: the prompt's ids
    #: were not known (not counted by ``/tokenize``). Beside ``cached_tokens``, what vLLM reported.
    cached_tokens_predicted: int | None = None
    cache_source: str | None = None
    #: The agent session it is a turn of: a digest scoped to the key (:mod:`gateway.proxy.sessions`).
    session: str | None = None
    #: ``interactive`` or ``batch``: the request's class in the queue (x-priority, capped by its key's)
    request_class: str | None = None
    upstream_ttft_s: float | None = None
    ttft_s: float | None = None
    decode_tokens_per_s: float | None = None
    e2e_s: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: str | None = None
    client_disconnected: bool = False
    #: How the request ended: ``complete`` (its whole answer sent), ``error`` (answered with an error,
    #: or a stream ended by an error event), ``client_gone`` (the client left first; also a server
    #: shutdown), ``client_slow`` (cut: it read nothing for GATEWAY_CLIENT_WRITE_TIMEOUT_S).
    end_reason: str | None = None
    spec: SpecStats | None = None
    spec_candidates: list[SpecStats] = field(default_factory=list)
    clamped: list[str] = field(default_factory=list)
    tool_calls_dropped: int = 0
    #: The group (team) of the key, if it has one: its id and name (:mod:`gateway.auth.groups`).
    group_id: str | None = None
    group_name: str | None = None
    #: The ``x-request-id`` the client sent, if sane (:mod:`gateway.http.request_id`): never the id; a
    #: batch line's ``custom_id``.
    client_request_id: str | None = None
    #: The batch it is a line of (:mod:`gateway.batch.runner`), None for a request a client sent.
    batch_id: str | None = None
    #: Its W3C trace id (32 hex digits): its span's when tracing is on, else the one the client's
    #: ``traceparent`` named; None: neither (:mod:`gateway.telemetry.tracing`).
    trace_id: str | None = None

    def client_view(self) -> dict[str, Any]:
        """The ``telemetry`` object a client gets: exactly :data:`CLIENT_FIELDS` plus ``spec``."""
        view: dict[str, Any] = {name: getattr(self, name) for name in CLIENT_FIELDS}
        for name in ("queue_wait_s", "ttft_s", "upstream_ttft_s", "decode_tokens_per_s", "e2e_s"):
            view[name] = _round(view[name])
        view["spec"] = self.spec.as_dict() if self.spec else None
        return view

    def as_record(self) -> dict[str, Any]:
        """Everything, JSON-ready (for ``/admin/requests`` and the ledger). No prompt text, no key."""
        record = {
            name: getattr(self, name)
            for name in self.__slots__  # type: ignore[attr-defined]
            if name not in ("spec", "spec_candidates", "arrived_at")
        }
        record["arrived_at"] = self.arrived_at.isoformat()
        record["spec"] = self.spec.as_dict() if self.spec else None
        record["spec_candidates"] = [s.as_dict() for s in self.spec_candidates]
        return record
