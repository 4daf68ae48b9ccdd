"""Request normalisation: what the client sent -> what vLLM serving DeepSeek-V4 reads.

- thinking dialects -> ``chat_template_kwargs`` (:mod:`gateway.openai_api.thinking`);
- assistant messages' ``reasoning_content``/``reasoning`` -> the one field the backend reads
  (vLLM >= 0.16 reads only ``reasoning``);
- ``include_reasoning`` is taken out and applied by the gateway (tokens are still generated and counted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gateway.errors import GatewayError
from gateway.openai_api.thinking import Level, Thinking, apply_thinking, resolve_thinking

_REASONING_INPUT_FIELDS = ("reasoning_content", "reasoning")
THINK_START = "<think>"


@dataclass(frozen=True, slots=True)
class Normalized:
    """The thinking mode sent upstream and whether the client wants reasoning back."""

    thinking: Thinking
    include_reasoning: bool


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
    return Normalized(thinking, include)


def normalize_completion(payload: dict[str, Any]) -> Normalized:
    """Text completions carry a raw prompt: thinking is on when it ends with ``<think>`` (the template's
    generation prompt in thinking mode), so the output starts inside reasoning."""
    include = _include_reasoning(payload)
    prompt = payload.get("prompt")
    on = isinstance(prompt, str) and prompt.rstrip().endswith(THINK_START)
    return Normalized(Thinking("high" if on else "off"), include)
