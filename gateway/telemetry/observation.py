"""What a dialect reports to telemetry about one response chunk or body, in no dialect's shape.

A dialect's translator fills one :class:`Observation` per upstream chunk (or one for a whole body)
and hands it to :meth:`~gateway.telemetry.recorder.RequestRecorder.observe`; the recorder never parses
a response itself. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class Observation:
    """One chunk's (or one whole body's) facts.

    - ``output``: it carried output — reasoning, answer text or a tool call (the first such chunk is
      the first token; a role-only chunk is not);
    - ``reasoning_chars`` / ``content_chars``: characters of reasoning and of answer it released
      (after the gateway's split), for attributing tokens to reasoning;
    - ``finish_reason``: the reason a sequence ended, if this chunk says (OpenAI's names);
    - ``usage``: the upstream's usage object in OpenAI / vLLM form (``prompt_tokens``,
      ``completion_tokens``, ``prompt_tokens_details.cached_tokens``,
      ``completion_tokens_details.reasoning_tokens``), raw as received; cumulative on a stream
      (vLLM ``continuous_usage_stats``: each chunk is one engine step) unless ``final``;
    - ``final``: the stream's closing usage chunk (totals, not a step);
    - ``metrics``: vLLM's per-request ``metrics`` object (``--enable-per-request-metrics``), raw;
    - ``indices``: the choice (sequence) indices the chunk spoke for — step accounting needs one;
    - ``tool_calls_dropped``: tool calls the model spelled out (DSML) that were not handed over, since
      the request declared no tools.
    """

    output: bool = False
    reasoning_chars: int = 0
    content_chars: int = 0
    finish_reason: str | None = None
    usage: Mapping[str, Any] | None = None
    final: bool = False
    metrics: Mapping[str, Any] | None = None
    indices: tuple[int, ...] = ()
    tool_calls_dropped: int = 0
