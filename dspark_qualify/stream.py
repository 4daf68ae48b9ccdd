"""One streamed chat completion, timed on the client (official OpenAI SDK, async client).

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
- ``itl`` (inter-token latencies) = the gaps between consecutive chunks carrying text. As in vLLM's
  ``vllm bench serve`` (``benchmarks/lib/endpoint_request_func.py``) a gap is per chunk, not per token:
  a DSpark chunk holds one engine step, 1..k+1 tokens.
- ``t_end`` = when the stream ended (``[DONE]``): the end-to-end latency.

Reasoning is read from ``delta.model_extra`` (``reasoning_content``, else ``reasoning``: the gateway
sends both by default, vLLM ≥ 0.16 sends ``reasoning``). Acceptance is not measurable on the client: it
is read from the gateway's ``telemetry`` object (header ``x-gateway-telemetry: 1``, final chunk,
``docs/telemetry.md``), and stays ``None`` when the server sends none (e.g. vLLM directly).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionChunk

__all__ = ["TELEMETRY_HEADER", "StreamResult", "decode_rate", "reasoning_of", "stream_chat"]

TELEMETRY_HEADER = {"x-gateway-telemetry": "1"}
REASONING_FIELDS = ("reasoning_content", "reasoning")


@dataclass(slots=True)
class StreamResult:
    """What one streamed completion produced and when (seconds since the request was sent)."""

    text_times: list[float] = field(default_factory=list)
    t_end: float = 0.0
    reasoning: str = ""
    content: str = ""
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    telemetry: dict[str, Any] | None = None
    chunks: int = 0

    @property
    def t_first(self) -> float | None:
        return self.text_times[0] if self.text_times else None

    @property
    def t_last(self) -> float | None:
        return self.text_times[-1] if self.text_times else None

    @property
    def itl(self) -> list[float]:
        """Gaps between consecutive chunks carrying text, s (one chunk may hold several tokens)."""
        return [b - a for a, b in pairwise(self.text_times)]

    @property
    def completion_tokens(self) -> int | None:
        return None if self.usage is None else self.usage.get("completion_tokens")

    @property
    def decode_tokens_per_s(self) -> float | None:
        return decode_rate(self.completion_tokens, self.t_first, self.t_last)

    def observe(self, chunk: ChatCompletionChunk, now: float) -> None:
        """Take one chunk that arrived ``now`` seconds after the request was sent."""
        self.chunks += 1
        extra = chunk.model_extra or {}
        if isinstance(extra.get("telemetry"), dict):
            self.telemetry = extra["telemetry"]
        if chunk.usage is not None:
            self.usage = chunk.usage.model_dump()
        text = False
        for choice in chunk.choices:
            piece_r = reasoning_of(choice.delta.model_extra)
            piece_c = choice.delta.content or ""
            text = text or bool(piece_r or piece_c)
            self.reasoning += piece_r
            self.content += piece_c
            self.finish_reason = choice.finish_reason or self.finish_reason
        if text:
            self.text_times.append(now)


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


async def stream_chat(
    client: AsyncOpenAI,
    model: str,
    messages: Any,
    *,
    max_tokens: int,
    extra_body: dict[str, Any] | None = None,
) -> StreamResult:
    """Stream one chat completion and time it (see the module doc for the definitions)."""
    result = StreamResult()
    start = time.perf_counter()
    stream = await client.chat.completions.create(
        model=model,
        messages=messages,
        max_tokens=max_tokens,
        stream=True,
        stream_options={"include_usage": True},
        extra_headers=TELEMETRY_HEADER,
        extra_body=extra_body,
    )
    async with stream:
        async for chunk in stream:
            result.observe(chunk, time.perf_counter() - start)
    result.t_end = time.perf_counter() - start
    return result
