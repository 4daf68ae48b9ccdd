"""Anthropic Messages objects as vLLM 0.32 sends them (pure builders and the stream's state machine).

vLLM serves Messages by converting to and from a chat completion (vllm/entrypoints/anthropic/
serving.py), which shapes everything here:

- the id is the chat completion's (``chatcmpl-...``), a call's id the chat tool call's
  (``chatcmpl-tool-...``), a thinking block's signature a fresh ``uuid4().hex``;
- non-stream (``messages_full_converter``, dumped without nulls, so no ``stop_sequence``): a
  ``thinking`` block, a ``text`` block, ``tool_use`` blocks, each only if present (a lone empty text
  block if none); a call cut by ``max_tokens`` is left out, where vLLM would fail to decode its
  arguments;
- stop reasons (``_to_anthropic_stop_reason``): "max_tokens" when cut, "tool_use" after a call,
  else "end_turn";
- stream (``message_stream_converter``, no ``ping`` events): ``message_start`` with the first token,
  then per block ``content_block_start`` (empty ``thinking``/``text``, or ``tool_use`` with ``input:
  {}``), its deltas (``thinking_delta``, ``text_delta``, ``input_json_delta``) and
  ``content_block_stop`` (a thinking block sends its ``signature_delta`` just before), then
  ``message_delta`` (stop reason, usage) and ``message_stop``;
- errors raised while serving: ``{"type": "error", "error": {"type", "message"}}`` with vLLM's error
  type (``translate_error_response`` in api_router.py); a body that fails validation gets vLLM's
  app-wide OpenAI-shaped 400 instead, since FastAPI refuses it before the route runs.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from .errors import SimError
from .sequence import Step
from .streams import Generation
from .text import Output


def error_body(exc: SimError) -> dict[str, Any]:
    """An error raised while serving, as vLLM's Anthropic router answers it."""
    return {"type": "error", "error": {"type": exc.type, "message": exc.message}}


def count_tokens_body(input_tokens: int) -> dict[str, Any]:
    """``/v1/messages/count_tokens``'s answer."""
    return {"input_tokens": input_tokens, "context_management": {"original_input_tokens": input_tokens}}


def stop_reason(output: Output) -> str:
    """The Anthropic stop reason of a finished output."""
    if output.finish_reason == "length":
        return "max_tokens"
    return "tool_use" if output.call is not None else "end_turn"


def usage(gen: Generation) -> dict[str, int]:
    """Tokens so far, and ``cache_read_input_tokens`` when the prefix cache served some of the prompt;
    ``input_tokens`` is the rest of the prompt, as Anthropic defines it (vLLM 0.32
    ``anthropic/serving.py`` ``_build_anthropic_usage``: prompt tokens less the cached ones)."""
    tokens = {
        "input_tokens": gen.seq.prompt_tokens - gen.seq.cached_tokens,
        "output_tokens": gen.seq.generated,
    }
    if gen.seq.cached_tokens:
        tokens["cache_read_input_tokens"] = gen.seq.cached_tokens
    return tokens


def message_body(gen: Generation) -> dict[str, Any]:
    """A non-streamed message."""
    output = gen.output
    span = output.span(split=gen.split_reasoning)
    content: list[dict[str, Any]] = []
    if span.reasoning:
        content.append({"type": "thinking", "thinking": span.reasoning, "signature": uuid.uuid4().hex})
    if span.content:
        content.append({"type": "text", "text": span.content})
    if output.call is not None and output.finish_reason != "length":
        call = {"type": "tool_use", "id": gen.call_id, "name": output.call.name}
        content.append({**call, "input": json.loads(span.arguments)})
    return {
        "id": gen.envelope.id,
        "type": "message",
        "role": "assistant",
        "content": content or [{"type": "text", "text": ""}],
        "model": gen.envelope.model,
        "stop_reason": stop_reason(output),
        "usage": usage(gen),
    }


class MessagesStream:
    """The Messages stream of one generation (a ``streams.Dialect``)."""

    def __init__(self, gen: Generation) -> None:
        self._gen = gen
        self._index = 0  # index of the next block
        self._block: str | None = None  # type of the open block
        self._signature = ""  # the open thinking block's

    def opening(self) -> list[dict[str, Any]]:
        """Nothing: vLLM sends ``message_start`` with the first token."""
        return []

    def step(self, step: Step) -> list[dict[str, Any]]:
        """The step's reasoning, text and call parts, in that order, each in its block."""
        gen = self._gen
        events: list[dict[str, Any]] = []
        if step.start == 0:
            message: dict[str, Any] = {
                "id": gen.envelope.id,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": gen.envelope.model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": gen.seq.prompt_tokens, "output_tokens": 0},
            }
            events.append({"type": "message_start", "message": message})
        span = gen.output.span(step.start, step.end, split=gen.split_reasoning)
        if span.reasoning:
            if self._block != "thinking":
                events += self._start({"type": "thinking", "thinking": ""})
            events.append(self._delta({"type": "thinking_delta", "thinking": span.reasoning}))
        if span.content:
            if self._block != "text":
                events += self._start({"type": "text", "text": ""})
            events.append(self._delta({"type": "text_delta", "text": span.content}))
        if span.arguments and gen.output.call is not None:
            if span.opens_call:
                block: dict[str, Any] = {
                    "type": "tool_use",
                    "id": gen.call_id,
                    "name": gen.output.call.name,
                    "input": {},
                }
                events += self._start(block)
            events.append(self._delta({"type": "input_json_delta", "partial_json": span.arguments}))
        return events

    def closing(self) -> list[dict[str, Any]]:
        """The open block's stop, ``message_delta`` and ``message_stop``."""
        delta = {"stop_reason": stop_reason(self._gen.output), "stop_sequence": None}
        return [
            *self._stop(),
            {"type": "message_delta", "delta": delta, "usage": usage(self._gen)},
            {"type": "message_stop"},
        ]

    def _start(self, block: dict[str, Any]) -> list[dict[str, Any]]:
        events = self._stop()
        self._block = block["type"]
        if self._block == "thinking":
            self._signature = uuid.uuid4().hex
        events.append({"type": "content_block_start", "content_block": block, "index": self._index})
        return events

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "delta": delta, "index": self._index}

    def _stop(self) -> list[dict[str, Any]]:
        if self._block is None:
            return []
        events = []
        if self._block == "thinking":
            events.append(self._delta({"type": "signature_delta", "signature": self._signature}))
        events.append({"type": "content_block_stop", "index": self._index})
        self._block = None
        self._index += 1
        return events
