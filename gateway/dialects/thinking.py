"""Thinking control: resolve a request's thinking mode and rewrite it for DeepSeek-V4 on vLLM.

DeepSeek-V4's chat encoding takes ``thinking: bool`` and ``reasoning_effort`` in ``low|high|max``
(``vllm/tokenizers/deepseek_v4_encoding.py``; vLLM's DeepSeek-V4 parser reads ``thinking`` from
``chat_template_kwargs``). Clients speak several dialects; all become one :class:`Thinking`:

==============================================  =============================================
client sends                                    DeepSeek-V4 gets
==============================================  =============================================
``reasoning_effort``: none                      thinking off
``reasoning_effort``: minimal | low             low
``reasoning_effort``: medium | high             high
``reasoning_effort``: xhigh | max               max
``thinking``: false / ``{"type":"disabled"}``   thinking off
``thinking``: true / ``{"type":"enabled"}``     on, at the key's or gateway's default effort (high
                                                if that default is off)
``chat_template_kwargs`` ``thinking`` /         used as given (explicit wins over all of the above)
``reasoning_effort``
nothing                                         the key's default, else ``GATEWAY_DEFAULT_THINKING``
==============================================  =============================================

Precedence: ``chat_template_kwargs`` > ``thinking`` > ``reasoning_effort`` > key default > gateway default.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from gateway.errors import GatewayError

Level = Literal["off", "low", "high", "max"]
LEVELS: tuple[Level, ...] = ("off", "low", "high", "max")

#: OpenAI ``reasoning_effort`` values (and DeepSeek's ``max``) -> DeepSeek-V4 levels.
EFFORT_MAP: dict[str, Level] = {
    "none": "off",
    "minimal": "low",
    "low": "low",
    "medium": "high",
    "high": "high",
    "xhigh": "max",
    "max": "max",
}


def as_level(value: str) -> Level:
    """``value`` as a :data:`Level`; raises ``ValueError`` for anything else."""
    for level in LEVELS:
        if value == level:
            return level
    raise ValueError(f"thinking level must be one of {', '.join(LEVELS)}; got {value!r}")


@dataclass(frozen=True, slots=True)
class Thinking:
    """The resolved mode: ``on`` and its ``level`` (``off`` when not on)."""

    level: Level

    @property
    def on(self) -> bool:
        return self.level != "off"


def _bad(param: str, message: str) -> GatewayError:
    return GatewayError("invalid_value", message, param=param)


def _from_effort(value: Any, param: str) -> Level:
    if not isinstance(value, str) or value.lower() not in EFFORT_MAP:
        raise _bad(param, f"{param} must be one of {', '.join(EFFORT_MAP)}; got {value!r}.")
    return EFFORT_MAP[value.lower()]


def _enabled(value: Any) -> bool:
    """``thinking`` as a bool or as ``{"type": "enabled"|"disabled"}`` (Anthropic / DeepSeek API shape)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, dict) and value.get("type") in ("enabled", "disabled"):
        return value["type"] == "enabled"
    raise _bad("thinking", 'thinking must be true, false, {"type": "enabled"} or {"type": "disabled"}.')


def resolve_thinking(payload: dict[str, Any], default: Level) -> Thinking:
    """Resolve the thinking mode of a chat request body (not modified). Raises 400 on invalid values."""
    kwargs = payload.get("chat_template_kwargs")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise _bad("chat_template_kwargs", "chat_template_kwargs must be an object.")
    kwargs = kwargs or {}
    on_default: Level = default if default != "off" else "high"
    for key in ("thinking", "enable_thinking"):
        if key in kwargs:
            if not _enabled(kwargs[key]):
                return Thinking("off")
            effort = kwargs.get("reasoning_effort")
            return Thinking(
                _from_effort(effort, "chat_template_kwargs.reasoning_effort") if effort else on_default
            )
    if "reasoning_effort" in kwargs:
        return Thinking(_from_effort(kwargs["reasoning_effort"], "chat_template_kwargs.reasoning_effort"))
    if payload.get("thinking") is not None:
        if not _enabled(payload["thinking"]):
            return Thinking("off")
        effort = payload.get("reasoning_effort")
        level = _from_effort(effort, "reasoning_effort") if effort is not None else on_default
        return Thinking(level if level != "off" else on_default)
    if payload.get("reasoning_effort") is not None:
        return Thinking(_from_effort(payload["reasoning_effort"], "reasoning_effort"))
    return Thinking(default)


def apply_thinking(payload: dict[str, Any], thinking: Thinking) -> None:
    """Write ``thinking`` into ``payload`` as DeepSeek-V4's ``chat_template_kwargs`` (in place).

    The dialect fields (``thinking``, ``reasoning_effort``) are removed; other template kwargs stay.
    """
    payload.pop("thinking", None)
    payload.pop("reasoning_effort", None)
    set_template_thinking(payload, thinking)


def set_template_thinking(payload: dict[str, Any], thinking: Thinking) -> None:
    """Write ``thinking`` into ``payload["chat_template_kwargs"]`` (in place; other template kwargs stay)."""
    kwargs = dict(payload.get("chat_template_kwargs") or {})
    kwargs.pop("enable_thinking", None)
    kwargs["thinking"] = thinking.on
    if thinking.on:
        kwargs["reasoning_effort"] = thinking.level
    else:
        kwargs.pop("reasoning_effort", None)
    payload["chat_template_kwargs"] = kwargs
