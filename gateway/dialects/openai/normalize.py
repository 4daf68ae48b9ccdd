"""Request normalisation: what the client sent -> what vLLM serving DeepSeek-V4 reads.

- thinking dialects -> ``chat_template_kwargs`` (:mod:`gateway.dialects.thinking`);
- assistant messages' ``reasoning_content``/``reasoning`` -> the one field the backend reads
  (vLLM >= 0.16 reads only ``reasoning``);
- ``include_reasoning`` is taken out and applied by the gateway (tokens are still generated and counted);
- what the reasoning split must know of the output: whether the raw prompt opened reasoning (text
  completions) and whether the answer is held to a format (``response_format`` JSON, or vLLM's
  structured-output fields), which no reasoning precedes unless a marker shows one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.dialects.fields import STRUCTURED_FIELDS
from gateway.dialects.thinking import Level, Thinking, apply_thinking, resolve_thinking
from gateway.errors import GatewayError

_REASONING_INPUT_FIELDS = ("reasoning_content", "reasoning")


@dataclass(frozen=True, slots=True)
class Normalized:
    """The thinking mode sent upstream, whether the client wants reasoning back, whether the prompt
    ends with the reasoning start marker (``opened``: the output starts inside reasoning) and
    whether the answer is held to a format (``structured``)."""

    thinking: Thinking
    include_reasoning: bool
    opened: bool = False
    structured: bool = False


def _structured(payload: dict[str, Any]) -> bool:
    """``response_format`` other than ``text`` (OpenAI: ``json_object``, ``json_schema``), or one of
    vLLM's structured-output fields."""
    response_format = payload.get("response_format")
    kind = response_format.get("type") if isinstance(response_format, dict) else None
    return (kind is not None and kind != "text") or any(
        payload.get(name) is not None for name in STRUCTURED_FIELDS
    )


def _include_reasoning(payload: dict[str, Any]) -> bool:
    value = payload.pop("include_reasoning", True)
    if not isinstance(value, bool):
        raise GatewayError("invalid_value", "include_reasoning must be a boolean.", param="include_reasoning")
    return value


def normalize_chat(payload: dict[str, Any], default: Level, backend_field: str) -> Normalized:
    """Rewrite a chat request body in place. Raises 400 ``GatewayError`` on invalid thinking fields."""
    include = _include_reasoning(payload)
    thinking = resolve_thinking(payload, default)
    apply_thinking(payload, thinking)
    for message in payload.get("messages", ()):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        reasoning = None
        for name in _REASONING_INPUT_FIELDS:
            value = message.pop(name, None)
            reasoning = reasoning if reasoning is not None else value
        if reasoning is not None:
            message[backend_field] = reasoning
    return Normalized(thinking, include, structured=_structured(payload))


def normalize_completion(payload: dict[str, Any], start_marker: str) -> Normalized:
    """Text completions carry a raw prompt: thinking is on when it ends with ``start_marker`` (the
    template's generation prompt in thinking mode, ``<think>``), so the output starts inside reasoning."""
    include = _include_reasoning(payload)
    prompt = payload.get("prompt")
    on = isinstance(prompt, str) and prompt.rstrip().endswith(start_marker.rstrip() or start_marker)
    return Normalized(Thinking("high" if on else "off"), include, opened=on, structured=_structured(payload))
