"""One streamed chat completion, timed on the client (official OpenAI SDK).

Times are ``time.perf_counter()`` seconds on the client, from just before the request is sent:

- ``ttft_s`` = t_first − t_send, where t_first is the arrival of the first chunk with a non-empty
  reasoning or content delta (the role-only chunk does not count). Includes network, queueing and
  prefill: this is the latency a user sees, which the gateway's own ``ttft_s`` (from request arrival
  at the gateway) is not.
- ``decode_tokens_per_s`` = (completion_tokens − 1) / (t_last − t_first), t_last the arrival of the last
  chunk with a non-empty delta, completion_tokens from the final ``usage`` (``stream_options.include_usage``).
  The first token is excluded because it is produced by prefill, not decode. A DSpark chunk carries
  several tokens, so tokens are never counted from chunks. Undefined (``None``) for < 2 tokens or
  when all text arrived in one chunk.

Reasoning is read from ``delta.model_extra`` (``reasoning_content``, else ``reasoning``: the gateway
sends both by default, vLLM ≥ 0.16 sends ``reasoning``). Acceptance is not measurable on the client: it
is read from the gateway's ``telemetry`` object (header ``x-gateway-telemetry: 1``, final chunk,
``docs/telemetry.md``), and stays ``None`` when the server sends none (e.g. vLLM directly).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from openai import OpenAI

__all__ = ["TELEMETRY_HEADER", "StreamResult", "decode_rate", "reasoning_of", "stream_chat"]

TELEMETRY_HEADER = {"x-gateway-telemetry": "1"}
REASONING_FIELDS = ("reasoning_content", "reasoning")


@dataclass(slots=True)
class StreamResult:
    """What one streamed completion produced and when (seconds since the request was sent)."""

    t_first: float | None = None
    t_last: float | None = None
    t_end: float = 0.0
    reasoning: str = ""
    content: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None
    chunks: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def completion_tokens(self) -> int | None:
        return None if self.usage is None else self.usage.get("completion_tokens")

    @property
    def decode_tokens_per_s(self) -> float | None:
        return decode_rate(self.completion_tokens, self.t_first, self.t_last)


def decode_rate(completion_tokens: int | None, t_first: float | None, t_last: float | None) -> float | None:
    """(completion_tokens − 1) / (t_last − t_first), tokens/s; ``None`` when undefined."""
    if completion_tokens is None or t_first is None or t_last is None or completion_tokens < 2:
        return None
    span = t_last - t_first
    return (completion_tokens - 1) / span if span > 0 else None


def reasoning_of(extra: dict[str, Any] | None) -> str:
    """The reasoning text of a delta/message's extra fields ("" when none)."""
    for name in REASONING_FIELDS:
        value = (extra or {}).get(name)
        if isinstance(value, str) and value:
            return value
    return ""


def stream_chat(
    client: OpenAI,
    model: str,
    messages: Any,
    *,
    max_tokens: int,
    extra_body: dict[str, Any] | None = None,
) -> StreamResult:
    """Stream one chat completion and time it (see the module doc for the definitions)."""
    result = StreamResult()
    start = time.perf_counter()
    stream = client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=TELEMETRY_HEADER,
        extra_body=extra_body,
    )
    with stream:
        for chunk in stream:
            now = time.perf_counter() - start
            result.chunks += 1
            extra = chunk.model_extra or {}
            if isinstance(extra.get("telemetry"), dict):
                result.telemetry = extra["telemetry"]
            if chunk.usage is not None:
                result.usage = chunk.usage.model_dump()
            for choice in chunk.choices:
                piece_r = reasoning_of(choice.delta.model_extra)
                piece_c = choice.delta.content or ""
                if piece_r or piece_c:
                    result.t_first = now if result.t_first is None else result.t_first
                    result.t_last = now
                result.reasoning += piece_r
                result.content += piece_c
                result.finish_reason = choice.finish_reason or result.finish_reason
    result.t_end = time.perf_counter() - start
    return result
