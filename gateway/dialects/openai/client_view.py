"""What the client asked to see besides choices: usage, the backend's ``metrics``, the gateway's telemetry.

The gateway always asks upstream for usage on every chunk (``include_usage`` +
``continuous_usage_stats``) because telemetry needs it; the client gets usage only as it asked
(OpenAI: ``stream_options.include_usage`` -> a final chunk with ``choices: []``; vLLM's
``continuous_usage_stats`` -> also on every chunk), the backend's per-request ``metrics`` only with
``include_metrics: true``, and a ``telemetry`` object only with the header ``x-gateway-telemetry: 1``
(on the closing usage chunk of a stream, :class:`~gateway.dialects.openai.rewrite.StreamRewriter`;
on a whole body, by the request's owner).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ClientView:
    """The client's asks for one request (``telemetry``: the gateway's telemetry object)."""

    include_usage: bool = False
    continuous_usage: bool = False
    include_metrics: bool = False
    telemetry: bool = False

    def apply_chunk(self, chunk: dict[str, Any], final: bool) -> bool:
        """Strip the fields of one stream chunk the client did not ask for, in place; return True if it
        changed. ``final``: the upstream's usage chunk (it came with ``choices: []``)."""
        changed = False
        if "usage" in chunk and not (self.include_usage and (final or self.continuous_usage)):
            del chunk["usage"]
            changed = True
        if "metrics" in chunk and not self.include_metrics:
            del chunk["metrics"]
            changed = True
        return changed

    @staticmethod
    def says_nothing(chunk: dict[str, Any]) -> bool:
        """True for a chunk left with no choices, usage, metrics or telemetry: not worth sending."""
        return not chunk.get("choices") and not any(k in chunk for k in ("usage", "metrics", "telemetry"))

    def apply_body(self, body: dict[str, Any]) -> None:
        """Non-stream: usage always stays (OpenAI always returns it); metrics as asked."""
        if "metrics" in body and not self.include_metrics:
            del body["metrics"]
